package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/peer/stripes"
	"github.com/weightsnap/weightsnap/store"
)

// TestForestAdopter: a stripe whose source failed re-attaches to one of
// the forest's adopters, else the root; once the root is gone (tried, or
// remembered as down), to the first live member of the rendezvous ranking,
// which takes the root's place and alone goes to the registry.
func TestForestAdopter(t *testing.T) {
	var members []string
	for i := range 10 {
		members = append(members, fmt.Sprintf("10.0.0.%d:7420", i+1))
	}
	id, err := artifact.ParseID("sha256:68314ca99738eb0ea1ade815e1c401325d17ca690f2de6342601c9ca10d9ac87")
	if err != nil {
		t.Fatal(err)
	}
	forest, err := stripes.Place(id, members, stripes.DefaultStripes)
	if err != nil {
		t.Fatal(err)
	}
	rank := forest.Ranking()
	root := rank[0]
	// The first heap child of stripe 0's head, which takes the head's place
	// under the root when the head fails.
	deep := rank[1+forest.Stripes()]
	for _, tc := range []struct {
		name      string
		self      string
		failed    string
		stripe    int
		down      []string
		want      string // "" when the stripe has no source left
		rootPlace bool   // self takes the root's place
	}{
		{name: "a head loses the root: the next of the ranking", self: rank[2], failed: root, stripe: 1, want: rank[1]},
		{name: "the next of the ranking loses the root: it takes its place", self: rank[1], failed: root, stripe: 0, rootPlace: true},
		{name: "the next of the ranking is down too", self: rank[3], failed: root, stripe: 2, down: []string{rank[1]}, want: rank[2]},
		{name: "every member before this one is gone", self: rank[3], failed: root, stripe: 2, down: []string{rank[1], rank[2]}, rootPlace: true},
		{name: "a head's first child loses the head: the root", self: deep, failed: rank[1], stripe: 0, want: root},
		{name: "a head's first child loses the head, the root down: the next of the ranking", self: deep, failed: rank[1], stripe: 0, down: []string{root}, want: rank[2]},
		{name: "the last of the ranking loses stripe 0's head: its first adopter", self: rank[len(rank)-1], failed: rank[1], stripe: 0, want: forest.Adopters(rank[len(rank)-1], rank[1], 0)[0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fetcher{forest: &forestPlan{forest: forest, self: tc.self}, o: FetchOptions{Client: ClientConfig{Down: NewDownPeers()}}}
			for _, d := range tc.down {
				f.o.Client.Down.drop(d, errors.New("no route to host"))
			}
			tried := map[string]bool{tc.failed: true}
			if got := f.adopter(tc.failed, tc.stripe, tried); got != tc.want {
				t.Errorf("adopter: %q, want %q", got, tc.want)
			}
			if got := f.rootsPlace(tried); got != tc.rootPlace {
				t.Errorf("takes the root's place: %v, want %v", got, tc.rootPlace)
			}
		})
	}
}

// TestForestRootDies: the root dies mid-transfer, with part of the
// artifact verified. The next member of the rendezvous ranking leaves its
// fetch for the registry (counted under its reason), and every member
// publishes exact bytes (TestForestAdopter: the other stripe heads
// re-attach to it).
func TestForestRootDies(t *testing.T) {
	a, identity := seededInPieces(t, 2)
	id, err := identity.ID()
	if err != nil {
		t.Fatal(err)
	}
	forest, ms := forestOf(t, id, 10)
	root := ms[0]
	p := &delayedProducer{hold: true}
	root.d = storetest.Open(t)
	_, stop := serveStoppable(t, root.d, ServerConfig{}, root.l)
	startBuild(t, a, identity, p, root.d)
	t.Cleanup(func() { close(p.release) })
	// It dies once every stripe head verified bytes from it and waits on
	// it for what it has not verified.
	heads := ms[1 : 1+forest.Stripes()]
	served := make([]atomic.Int64, len(heads))
	for i, head := range heads {
		head.p.Options.Progress = func(n int64) { served[i].Add(n) }
	}
	fetching := ms[1:]
	for _, m := range fetching {
		m.d = storetest.Open(t)
		serveOn(t, m.d, ServerConfig{}, m.l)
	}
	go func() {
		waitFor(t, func() bool {
			for i := range served {
				if served[i].Load() == 0 {
					return false
				}
			}
			return buildWaiters() > 0
		})
		stop()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var origin atomic.Int64
	var wg sync.WaitGroup
	for _, m := range fetching {
		wg.Go(func() {
			l, _, err := m.d.Materialise(ctx, m.plan(id), store.MaterialiseOptions{ID: id})
			if err != nil && (errdefs.IsNotFound(err) || errdefs.IsUnavailable(err)) {
				// Resolution's next source: the registry.
				origin.Add(1)
				l, _, err = m.d.GetOrBuild(ctx, identity, fromOrigin(t, a, identity))
			}
			if err == nil {
				l.Close()
			}
			m.err = err
		})
	}
	wg.Wait()
	for _, m := range fetching {
		if m.err != nil {
			t.Fatalf("member %s: %v", m.addr, m.err)
		}
		verifyFull(t, m.d, id)
	}
	// The heads that re-attached to the next of the ranking ask it again
	// once its fetch from the root ended, and take its build from the
	// registry.
	if n := origin.Load(); n != 1 {
		t.Errorf("%d members went to the origin, want 1", n)
	}
	const reason = "the root of the striped forest is gone; this node takes its place"
	if got := testutil.ToFloat64(ms[1].p.originCounter().WithLabelValues(reason)); got != 1 {
		t.Errorf("the next of the ranking %s: origin_total{reason=%q} = %v, want 1", ms[1].addr, reason, got)
	}
}

// fromOrigin is a producer that copies the artifact identity that a holds
// whole, as the registry would.
func fromOrigin(t *testing.T, a *store.Domain, identity artifact.Identity) artifact.Producer {
	t.Helper()
	src := heldLease(t, a, identity)
	p := &delayedProducer{src: src, written: make(chan struct{}), release: make(chan struct{})}
	close(p.release)
	return p
}
