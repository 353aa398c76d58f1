package peer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/store"
)

// delayedProducer copies a READY artifact of another store like a builder
// that announces first and writes every byte at once, but records the
// files verified only once release is closed; it fails instead if fail. A
// lying one flips bytes of the last tensor of a file and records every
// file verified at once, then waits for release. A holding one records
// every file but the last (with holdLargest, the largest) verified at
// once, and that one at release.
type delayedProducer struct {
	src     *store.Lease
	written chan struct{}
	release chan struct{}
	fail    bool
	lie     bool
	hold    bool

	holdLargest bool
	everyPiece  bool
}

func (p *delayedProducer) Name() string { return artifact.PassthroughName }

func (p *delayedProducer) Produce(ctx context.Context, w artifact.Writer) error {
	sv, err := servableFromLease(p.src)
	if err != nil {
		return err
	}
	sd := w
	if err := announce(sd, &sv.manifest); err != nil {
		return err
	}
	if err := sd.Source(0); err != nil { // it copies a READY artifact
		return err
	}
	for _, f := range p.src.Files() {
		fw, err := w.Create(f.Path, f.Entry.Size)
		if err != nil {
			return err
		}
		data, err := f.Data()
		if err != nil {
			return err
		}
		if n := len(f.Entry.Tensors); p.lie && n > 0 {
			data = bytes.Clone(data)
			data[f.Entry.Tensors[n-1].Offset] ^= 0xff
			for _, x := range f.Entry.Tensors {
				for at := int64(0); p.everyPiece && at < x.Length; at += blake3.PieceSize {
					data[x.Offset+at] ^= 0xff
				}
			}
		}
		if _, err := fw.Write(data); err != nil {
			return err
		}
		if err := fw.Close(); err != nil {
			return err
		}
	}
	verify := func(files []*store.LeaseFile) error {
		for _, f := range files {
			if err := sd.Verified(f.Path, 0, f.Entry.Size); err != nil {
				return err
			}
		}
		return nil
	}
	all := p.src.Files()
	var early []*store.LeaseFile
	switch {
	case p.lie:
		early = all
	case p.hold && p.holdLargest:
		largest := slices.MaxFunc(all, func(a, b *store.LeaseFile) int { return cmp.Compare(a.Entry.Size, b.Entry.Size) })
		early = slices.DeleteFunc(slices.Clone(all), func(f *store.LeaseFile) bool { return f == largest })
	case p.hold:
		early = all[:len(all)-1]
	}
	if err := verify(early); err != nil {
		return err
	}
	close(p.written)
	<-p.release
	if p.fail || p.lie {
		return fmt.Errorf("the builder failed")
	}
	return verify(all)
}

// building starts a build on a new store, served, that copies a seeded
// artifact and holds its ranges unverified until release is closed.
func building(t *testing.T, fail bool) (*delayedProducer, artifact.Identity, string, chan error) {
	t.Helper()
	a, identity := storetest.Seeded(t, 8<<20, 2)
	p, addr, built := buildingFrom(t, a, identity, &delayedProducer{fail: fail}, ServerConfig{})
	return p, identity, addr, built
}

// buildingFrom starts p's build, on a new store served with cfg, of the
// artifact identity that a holds.
func buildingFrom(t *testing.T, a *store.Domain, identity artifact.Identity, p *delayedProducer, cfg ServerConfig) (*delayedProducer, string, chan error) {
	t.Helper()
	b := storetest.Open(t)
	_, addr := serve(t, b, cfg)
	return p, addr, startBuild(t, a, identity, p, b)
}

// heldLease is a lease on the artifact identity that a holds, closed when
// the test ends.
func heldLease(t *testing.T, a *store.Domain, identity artifact.Identity) *store.Lease {
	t.Helper()
	id, _ := identity.ID()
	src, err := a.Lookup(context.Background(), id, store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// startBuild starts p's build in b of the artifact identity that a holds,
// and returns once p wrote every byte.
func startBuild(t *testing.T, a *store.Domain, identity artifact.Identity, p *delayedProducer, b *store.Domain) chan error {
	t.Helper()
	src := heldLease(t, a, identity)
	p.src, p.written, p.release = src, make(chan struct{}), make(chan struct{})
	built := make(chan error, 1)
	go func() {
		l, _, err := b.GetOrBuild(context.Background(), identity, p)
		if err == nil {
			l.Close()
		}
		built <- err
	}()
	<-p.written
	return built
}

// TestBuildingArtifactServesOnlyVerifiedRanges: a child fetches from a
// node that builds the artifact; every byte is on the builder's disk, but
// none is sent before the builder records it verified.
func TestBuildingArtifactServesOnlyVerifiedRanges(t *testing.T) {
	p, identity, addr, built := building(t, false)
	ls, err := (ClientConfig{}).List(context.Background(), addr)
	if err != nil || len(ls.Artifacts) != 1 || !ls.Artifacts[0].Building || ls.Artifacts[0].VerifiedBytes != 0 {
		t.Fatalf("listing of a building artifact: %+v %v", ls, err)
	}
	var moved atomic.Int64
	c := storetest.Open(t)
	fetched := make(chan error, 1)
	go func() {
		l, _, err := Fetch(context.Background(), c, []string{addr}, digestOf(t, identity), FetchOptions{Progress: func(n int64) { moved.Add(n) }})
		if err == nil {
			verifyFull(t, c, l.ID)
			l.Close()
		}
		fetched <- err
	}()
	// The builder's server holds the child's first request: a byte would
	// have been sent instead.
	testenv.Eventually(t, 20*time.Second, func() bool { return buildWaiters() >= 1 }, "the builder's server does not wait for a verified range")
	select {
	case err := <-fetched:
		t.Fatalf("the fetch ended before the builder verified anything: %v", err)
	default:
	}
	if n := moved.Load(); n != 0 {
		t.Fatalf("%d bytes reached the child before any was verified", n)
	}
	if ls, _ := (ClientConfig{}).List(context.Background(), addr); ls == nil || ls.Artifacts[0].Children != 1 {
		t.Fatalf("listing while a child waits: %+v", ls)
	}
	close(p.release)
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
}

// TestBuildEndEndsTheSession: a build that fails ends its children's
// sessions with a typed reason instead of letting them wait.
func TestBuildEndEndsTheSession(t *testing.T) {
	p, identity, addr, built := building(t, true)
	c := storetest.Open(t)
	fetched := make(chan error, 1)
	go func() {
		_, _, err := Fetch(context.Background(), c, []string{addr}, digestOf(t, identity), FetchOptions{Patience: 500 * time.Millisecond})
		fetched <- err
	}()
	// The child's session is open, so the build's end must end it (a child
	// that came after the end would find nothing to fetch instead).
	testenv.Eventually(t, 20*time.Second, func() bool {
		ls, _ := (ClientConfig{}).List(context.Background(), addr)
		return ls != nil && len(ls.Artifacts) == 1 && ls.Artifacts[0].Children == 1
	}, "the child never joined the build")
	close(p.release)
	if err := <-built; err == nil {
		t.Fatal("the build did not fail")
	}
	select {
	case err := <-fetched:
		if err == nil {
			t.Fatal("the child published an artifact its only source never verified")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the child still waits on a build that ended")
	}
}

// TestLyingBuilderIsRefused: a builder that serves a unit with wrong bytes
// (recorded verified) is refused by the child, which names it and takes
// the unit from the holder once the holder has room.
func TestLyingBuilderIsRefused(t *testing.T) {
	a, identity := storetest.Seeded(t, 8<<20, 2)
	p, addrB, built := buildingFrom(t, a, identity, &delayedProducer{lie: true}, ServerConfig{})
	defer func() { close(p.release); <-built }()
	fetchPastRefusedBuilder(t, a, identity, addrB)
}

// fetchPastRefusedBuilder fetches identity from a holder serving a's store
// and the builder at addrB, which serves a wrong unit. The holder is full
// (max_children 1, a session held) until the fetch verified its first
// unit, so the fetch takes the builder first; it must refuse it and end
// from the holder, with every byte verified.
func fetchPastRefusedBuilder(t *testing.T, a *store.Domain, identity artifact.Identity, addrB string) {
	t.Helper()
	_, addrA := serve(t, a, ServerConfig{MaxChildren: 1})
	hold, err := openSession(context.Background(), ClientConfig{}.withDefaults(), addrA, mustRequest(t, digestOf(t, identity)))
	if err != nil {
		t.Fatal(err)
	}
	var free sync.Once
	defer free.Do(hold.close)
	c := storetest.Open(t)
	l, rep, err := Fetch(context.Background(), c, []string{addrA, addrB}, digestOf(t, identity), FetchOptions{Progress: func(int64) { free.Do(hold.close) }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	verifyFull(t, c, l.ID)
	if len(rep.Peers) < 2 || rep.Peers[0] != addrB || rep.Endpoint != addrA || rep.Failovers < 1 {
		t.Fatalf("report %+v: want the builder first, refused, then the holder", rep)
	}
}

// TestRendezvousElectsOneRoot: nodes that each rank the others and
// themselves agree on exactly one root per artifact.
func TestRendezvousElectsOneRoot(t *testing.T) {
	var nodes []string
	for i := range 16 {
		nodes = append(nodes, fmt.Sprintf("10.0.0.%d:7420", i+1))
	}
	roots := map[string]int{}
	for k := range 64 {
		id, _ := artifact.ParseIDHex(fmt.Sprintf("%064x", k+1))
		n := 0
		for i, self := range nodes {
			others := append(append([]string{}, nodes[:i]...), nodes[i+1:]...)
			if isRoot(id, others, self) {
				n++
				roots[self]++
			}
		}
		if n != 1 {
			t.Fatalf("artifact %d: %d roots, want 1", k, n)
		}
	}
	if len(roots) < 8 {
		t.Fatalf("64 artifacts rooted on only %d of 16 nodes: %v", len(roots), roots)
	}
}

// A builder is a source only once it has a source itself and, for a fetch
// that has a depth, only at a smaller one; a holder always is.
func TestEligibleSources(t *testing.T) {
	for _, tc := range []struct {
		name     string
		building bool
		depth    int // the peer's
		mine     int // the fetch's
		ok       bool
	}{
		{"holder, new fetch", false, 0, -1, true},
		{"holder, deep fetch", false, 0, 7, true},
		{"holder, fetch from a holder", false, 0, 0, true},
		{"builder with no source", true, -1, -1, false},
		{"attached builder, new fetch", true, 3, -1, true},
		{"nearer builder", true, 1, 3, true},
		{"builder as deep", true, 3, 3, false},
		{"deeper builder (maybe a child)", true, 4, 3, false},
		{"any builder, fetch from a holder", true, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sources{depth: tc.mine}
			err := s.eligible("10.0.0.1:7420", &wire.WeightManifest{Building: tc.building, Depth: tc.depth})
			if (err == nil) != tc.ok {
				t.Fatalf("eligible: %v, want ok %t", err, tc.ok)
			}
			if err != nil && (!errors.Is(err, errNotNearer) || !errdefs.IsUnavailable(err) || !peerFault(err)) {
				t.Fatalf("refusal %v: want errNotNearer, unavailable, a peer fault", err)
			}
		})
	}
	m := &wire.WeightManifest{Building: true, Depth: 2}
	if d := sourceDepth(m); d != 3 {
		t.Fatalf("depth through a builder at 2: %d", d)
	}
	if d := sourceDepth(&wire.WeightManifest{}); d != 0 {
		t.Fatalf("depth through a holder: %d", d)
	}
}
