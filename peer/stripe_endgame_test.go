package peer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestLagging: a stripe lags when every other stripe is done, or when it
// has a few pieces left and several times what any other has.
func TestLagging(t *testing.T) {
	const p = blake3.PieceSize
	for _, tc := range []struct {
		name string
		left []int64
		want bool
	}{
		{"the others done", []int64{5 * p, 0, 0}, true},
		{"done itself", []int64{0, 0, 0}, false},
		{"one stripe", []int64{5 * p}, false},
		{"a few pieces, four times the others'", []int64{8 * p, 2 * p, p}, true},
		{"a few pieces, less than four times the others'", []int64{8 * p, 3 * p, p}, false},
		{"many pieces", []int64{(endgamePieces + 1) * p, p, p}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lagging(0, tc.left); got != tc.want {
				t.Errorf("lagging(0, %v) = %v, want %v", tc.left, got, tc.want)
			}
		})
	}
}

// TestStripeEndgame: a member's source in one stripe holds the stripe's
// last pieces while the root serves the other stripe at once. Once the
// other stripe is done, the member asks the root, a second source, for
// the held stripe from its end backwards: the root serves the stripe's
// last unit, the held source its first, every unit of the stripe was
// claimed by the rail of one of the two, and the member publishes exact
// bytes.
func TestStripeEndgame(t *testing.T) {
	a, identity := seededInPieces(t, 2)
	id, err := identity.ID()
	if err != nil {
		t.Fatal(err)
	}
	forest, ms := forestOf(t, id, 5)
	if forest.Stripes() != 2 {
		t.Fatalf("%d stripes for 5 members, want 2", forest.Stripes())
	}
	root := ms[0]
	// self takes one stripe from the root and the other, s, from held.
	var self, held *forestMember
	s := -1
	for _, m := range ms[1:] {
		src := sourcesOf(forest, m.addr)
		for i, x := range src {
			if x != root.addr && src[1-i] == root.addr {
				self, s = m, i
				for _, h := range ms {
					if h.addr == x {
						held = h
					}
				}
			}
		}
	}
	if self == nil {
		t.Fatal("no member takes one stripe from the root and the other from another member")
	}
	serveOn(t, a, ServerConfig{}, root.l)
	p := &delayedProducer{hold: true, holdLargest: true}
	held.d = storetest.Open(t)
	serveOn(t, held.d, ServerConfig{}, held.l)
	startBuild(t, a, identity, p, held.d)
	released := false
	t.Cleanup(func() {
		if !released {
			close(p.release)
		}
	})
	for _, m := range ms[1:] {
		if m != self && m != held {
			m.l.Close() // not running: a second source it would be is passed over
		}
	}
	self.d = storetest.Open(t)
	serveOn(t, self.d, ServerConfig{}, self.l)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fetchers := make(chan *fetcher, 1)
	plan := func(ctx context.Context) (artifact.Identity, artifact.Producer, error) {
		identity, prod, err := self.p.ProducerForID(ctx, id)
		if f, ok := prod.(*fetcher); ok {
			fetchers <- f
		}
		return identity, prod, err
	}
	done := make(chan error, 1)
	go func() {
		l, _, err := self.d.Materialise(ctx, plan, store.MaterialiseOptions{ID: id})
		if err == nil {
			l.Close()
		}
		done <- err
	}()
	var f *fetcher
	select {
	case f = <-fetchers:
	case err := <-done:
		t.Fatalf("no striped fetch: %v", err)
	}
	stripe := f.forest.stripe(s)
	endgames := func() float64 { return testutil.ToFloat64(self.p.reattachCounter().WithLabelValues(reattachEndgame)) }
	// The held source verifies its last pieces once the second source took
	// every unit of the stripe its session did not claim.
	waitFor(t, func() bool {
		if endgames() == 0 {
			return false
		}
		todo := f.stripeTodo(stripe)
		f.units.mu.Lock()
		defer f.units.mu.Unlock()
		for _, u := range todo {
			if c := f.units.claims[unitKey{shard: u.shard, off: u.off}]; c == nil || c.addr != held.addr {
				return false
			}
		}
		return true
	})
	close(p.release)
	released = true
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	verifyFull(t, self.d, id)
	if n := endgames(); n != 1 {
		t.Errorf("%v second sessions counted, want 1", n)
	}
	// The stripe's units in fetch order, each with the source that served it.
	var order []string
	f.units.mu.Lock()
	for _, u := range f.units.units {
		us := u.pieces
		if us == nil {
			us = []*unit{u}
		}
		for _, x := range us {
			first := u.first + x.piece
			if x.parent == nil {
				first = u.first
			}
			if x.n == 0 || x.n > blake3.PieceSize || !stripe.Has(first) {
				continue
			}
			c := f.units.claims[unitKey{shard: x.shard, off: x.off}]
			if c == nil {
				t.Errorf("%s: verified, and no rail claimed it", x.what())
				continue
			}
			order = append(order, c.addr)
		}
	}
	f.units.mu.Unlock()
	if len(order) < 2 {
		t.Fatalf("stripe %s has %d units", stripe, len(order))
	}
	if order[0] != held.addr {
		t.Errorf("the stripe's first unit came from %s, want its source %s", order[0], held.addr)
	}
	if last := order[len(order)-1]; last != root.addr {
		t.Errorf("the stripe's last unit came from %s, want the second source %s", last, root.addr)
	}
	for i, addr := range order {
		if addr != held.addr && addr != root.addr {
			t.Errorf("unit %d of the stripe came from %s, neither source", i, addr)
		}
	}
	t.Logf("stripe %s: sources of its units in order: %v", stripe, order)
}
