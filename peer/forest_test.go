package peer

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/peer/stripes"
	"github.com/weightsnap/weightsnap/store"
)

// forestMember is one member of an in-process striped forest.
type forestMember struct {
	addr string
	l    net.Listener
	d    *store.Domain
	p    *Provider
	f    *fetcher // its fetch, once planned
	err  error
}

// plan is the member's plan for id through its provider; it keeps the
// fetch it planned in m.f.
func (m *forestMember) plan(id artifact.ID) store.Plan {
	return func(ctx context.Context) (artifact.Identity, artifact.Producer, error) {
		identity, prod, err := m.p.ProducerForID(ctx, id)
		if f, ok := prod.(*fetcher); ok {
			m.f = f
		}
		return identity, prod, err
	}
}

// forestOf listens for n members and places them in the striped forest of
// id: the members in the forest's rank order, the root first.
func forestOf(t *testing.T, id artifact.ID, n int) (*stripes.Forest, []*forestMember) {
	t.Helper()
	var addrs []string
	byAddr := map[string]*forestMember{}
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		m := &forestMember{addr: l.Addr().String(), l: l}
		addrs = append(addrs, m.addr)
		byAddr[m.addr] = m
	}
	forest, err := stripes.Place(id, addrs, stripes.DefaultStripes)
	if err != nil {
		t.Fatal(err)
	}
	var ms []*forestMember
	for _, a := range stripes.Rank(id, addrs) {
		m := byAddr[a]
		m.p = &Provider{Peers: slices.DeleteFunc(slices.Clone(addrs), func(s string) bool { return s == a }), Self: a,
			Options: FetchOptions{Structure: StructureForest, Client: ClientConfig{Timeout: 10 * time.Second}}}
		ms = append(ms, m)
	}
	return forest, ms
}

// fetchAllMembers has every member given resolve id through its provider
// at once, and waits for them.
func fetchAllMembers(ctx context.Context, id artifact.ID, ms []*forestMember) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			l, _, err := m.d.Materialise(ctx, m.plan(id), store.MaterialiseOptions{ID: id})
			if err == nil {
				l.Close()
			}
			m.err = err
		})
	}
	wg.Wait()
}

// TestForestFetch: members of a striped forest that start together, the
// root holding the artifact, each take every stripe from its source in the
// forest alone, one session a stripe, and publish exact bytes; a source
// that serves bad pieces (a lying builder) or dies mid-transfer (a builder
// that stops serving with part of the artifact verified) costs its
// children one re-attachment each, the liar is named, and every other
// member finishes. A source that stalls mid-transfer (a builder that
// verifies no more) is routed around: its children's stripe lags, and they
// leave it for an adopter.
func TestForestFetch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(p *delayedProducer) // the head of stripe 0's build; nil: it fetches like the others
		lie   bool
		stall bool // the faulty member serves on, verifying nothing more
	}{
		{name: "no fault"},
		{name: "a source serves bad pieces", fault: func(p *delayedProducer) { p.lie, p.everyPiece = true, true }, lie: true},
		{name: "a source dies mid-transfer", fault: func(p *delayedProducer) { p.hold = true }},
		{name: "a source stalls mid-transfer", fault: func(p *delayedProducer) { p.hold = true }, stall: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, identity := seededInPieces(t, 2)
			id, err := identity.ID()
			if err != nil {
				t.Fatal(err)
			}
			forest, ms := forestOf(t, id, 10)
			if forest.Stripes() != 3 {
				t.Fatalf("%d stripes for 10 members, want 3", forest.Stripes())
			}
			ms[0].d = a
			serveOn(t, a, ServerConfig{}, ms[0].l)
			fetching := ms[1:]
			var faulty *forestMember
			if tc.fault != nil {
				faulty, fetching = ms[1], ms[2:]
				p := &delayedProducer{}
				tc.fault(p)
				faulty.d = storetest.Open(t)
				_, stop := serveStoppable(t, faulty.d, ServerConfig{}, faulty.l)
				startBuild(t, a, identity, p, faulty.d)
				t.Cleanup(func() { close(p.release) })
				if p.hold && !tc.stall {
					// It dies once its children verified bytes and wait on it
					// for what it has not verified.
					var served atomic.Int64
					for _, m := range fetching {
						if slices.Contains(sourcesOf(forest, m.addr), faulty.addr) {
							m.p.Options.Progress = func(n int64) { served.Add(n) }
						}
					}
					go func() {
						waitFor(t, func() bool { return served.Load() > 0 && buildWaiters() > 0 })
						stop()
					}()
				}
			}
			for _, m := range fetching {
				m.d = storetest.Open(t)
				if tc.stall {
					m.p.SlowAfter = 500 * time.Millisecond
				}
				serveOn(t, m.d, ServerConfig{}, m.l)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			fetchAllMembers(ctx, id, fetching)
			orphans := 0
			for _, m := range fetching {
				if m.err != nil {
					t.Fatalf("member %s: %v", m.addr, m.err)
				}
				verifyFull(t, m.d, id)
				sources := sourcesOf(forest, m.addr)
				if faulty != nil && slices.Contains(sources, faulty.addr) {
					orphans++
					if m.f.stats.sessions.Failovers == 0 {
						t.Errorf("member %s: its source %s failed and it did not re-attach", m.addr, faulty.addr)
					}
					if reason := map[bool]string{false: reattachFailed, true: reattachSlow}[tc.stall]; !tc.lie &&
						testutil.ToFloat64(m.p.reattachCounter().WithLabelValues(reason)) == 0 {
						t.Errorf("member %s: no re-attachment counted under %q", m.addr, reason)
					}
					if tc.lie && !slices.Contains(m.f.stats.sessions.Refused, faulty.addr) {
						t.Errorf("member %s: the liar %s is not named (refused %v)", m.addr, faulty.addr, m.f.stats.sessions.Refused)
					}
					sources = append(sources, forest.Adopters(m.addr, faulty.addr, 0)...)
					sources = append(sources, forest.Root())
				}
				// A lagging stripe's last pieces may come from a second source.
				for _, src := range slices.Clone(sources) {
					for s := range forest.Stripes() {
						sources = append(sources, endgameCandidates(forest, m.addr, src, s)...)
					}
				}
				// A stall's orphans hold their own children back until they
				// re-attach: those may leave for an adopter too.
				for _, used := range m.f.stats.sessions.Peers {
					if tc.stall {
						break
					}
					if !slices.Contains(sources, used) {
						t.Errorf("member %s fetched from %s, none of its sources in the forest %v", m.addr, used, sources)
					}
				}
			}
			if faulty != nil && orphans == 0 {
				t.Fatalf("the faulty member %s is no member's source", faulty.addr)
			}
		})
	}
}

// sourcesOf are member's sources in the forest, one a stripe.
func sourcesOf(forest *stripes.Forest, member string) []string {
	var out []string
	for s := range forest.Stripes() {
		out = append(out, forest.Parent(member, s))
	}
	return out
}

// endgameCandidates are the members that may serve member's stripe s
// beside its source src there, as a second source (stripe_endgame.go).
func endgameCandidates(forest *stripes.Forest, member, src string, s int) []string {
	f := &fetcher{forest: &forestPlan{forest: forest, self: member}, o: FetchOptions{Client: ClientConfig{Down: NewDownPeers()}}}
	return f.endgameSources(src, s)
}

// seededInPieces is a new store holding a synthetic checkpoint in shards
// whose embedding and head are four pieces each, and its identity.
func seededInPieces(t *testing.T, shards int) (*store.Domain, artifact.Identity) {
	_, src := storetest.CheckpointOf(t, synth.Options{Size: 12 << 20, Shards: shards, DType: "BF16", Seed: 7, Vocab: 8192})
	d := storetest.Open(t)
	return d, storetest.Seed(t, d, src)
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, cond func() bool) {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("waited a minute")
			return
		}
	}
}

// TestStripedSession: a session of one stripe serves the chaining values
// of any unit and the bytes of its own stripe's pieces only, one piece a
// range, the listing names the stripe served, and a stripe of k is served
// to at most 2k sessions at once.
func TestStripedSession(t *testing.T) {
	s, id := seededInPieces(t, 1)
	srv, addr := serve(t, s, ServerConfig{})
	digest, err := id.ID()
	if err != nil {
		t.Fatal(err)
	}
	stripe := wire.Stripe{Index: 1, Count: 2}
	ctx := context.Background()
	cs, err := openSession(ctx, ClientConfig{}.withDefaults(), addr, wire.Request{ID: digest, Stripe: stripe})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.close()
	if err := cs.startPlane(ctx, ModeTCP, 1); err != nil {
		t.Fatal(err)
	}
	// A unit of at least two pieces: piece 0 and 1 of it are in two stripes.
	order := newPieceOrder(cs.manifest)
	var u orderedUnit
	shard := uint32(0)
	for i, us := range order.shards {
		for _, x := range us {
			if x.n > blake3.PieceSize {
				u, shard = x, uint32(i)
			}
		}
	}
	if u.n == 0 {
		t.Fatal("no unit of two pieces")
	}
	own := int64(0)
	if !stripe.Has(u.first) {
		own = 1
	}
	other := 1 - own
	at := func(p int64) uint64 { return uint64(u.off + p*blake3.PieceSize) }
	for _, tc := range []struct {
		name   string
		q      wire.RangeRequest
		served bool
	}{
		{"a piece of the stripe", wire.RangeRequest{Shard: shard, Off: at(own), N: blake3.PieceSize}, true},
		{"the chaining values of the unit", wire.RangeRequest{Shard: shard, Off: uint64(u.off), N: uint64(u.n), Pieces: true}, true},
		{"a piece of another stripe", wire.RangeRequest{Shard: shard, Off: at(other), N: blake3.PieceSize}, false},
		{"two pieces", wire.RangeRequest{Shard: shard, Off: at(0), N: 2 * blake3.PieceSize}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raddr, err := cs.railAddr(0)
			if err != nil {
				t.Fatal(err)
			}
			r, c, err := rawSession(t, raddr, wire.OpRail, "", wire.RailAttach{Secret: cs.secret, Generation: srv.genRaw}.Encode())
			if err != nil {
				t.Fatal(err)
			}
			c.Write(tc.q.Encode())
			err = wire.ReadStatus(r, "range")
			if tc.served && err != nil {
				t.Fatalf("range %+v refused: %v", tc.q, err)
			}
			if !tc.served && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("range %+v: got %v, want it refused", tc.q, err)
			}
		})
	}
	t.Run("listed", func(t *testing.T) {
		ls, err := ClientConfig{}.List(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		want := []wire.ListedStripe{{Index: stripe.Index, Count: stripe.Count, Sessions: 1}}
		if len(ls.Artifacts) != 1 || !slices.Equal(ls.Artifacts[0].Stripes, want) {
			t.Fatalf("listing %+v, want one artifact with stripes %+v", ls.Artifacts, want)
		}
	})
	t.Run("busy past twice the stripe count", func(t *testing.T) {
		for i := 2; i <= 2*stripe.Count; i++ {
			more, err := openSession(ctx, ClientConfig{}.withDefaults(), addr, wire.Request{ID: digest, Stripe: stripe})
			if err != nil {
				t.Fatalf("session %d of a stripe of %d: %v", i, stripe.Count, err)
			}
			defer more.close()
		}
		if _, err := openSession(ctx, ClientConfig{}.withDefaults(), addr, wire.Request{ID: digest, Stripe: stripe}); !isBusy(err) {
			t.Fatalf("session %d of a stripe of %d: %v, want busy", 2*stripe.Count+1, stripe.Count, err)
		}
	})
}

// TestStripeTouches: a unit's pieces first..first+n-1 touch a stripe of k
// when one of them is that stripe's (piece i is stripe i mod k's).
func TestStripeTouches(t *testing.T) {
	for _, tc := range []struct {
		stripe   wire.Stripe
		first, n int64
		want     bool
	}{
		{wire.Stripe{}, 5, 1, true},
		{wire.Stripe{Index: 2, Count: 4}, 2, 1, true},
		{wire.Stripe{Index: 2, Count: 4}, 3, 1, false},
		{wire.Stripe{Index: 2, Count: 4}, 3, 3, false}, // 3, 4, 5
		{wire.Stripe{Index: 2, Count: 4}, 3, 4, true},  // 3..6
		{wire.Stripe{Index: 0, Count: 4}, 5, 3, false}, // 5, 6, 7
		{wire.Stripe{Index: 0, Count: 4}, 5, 4, true},  // 5..8
	} {
		if got := stripeTouches(tc.stripe, tc.first, tc.n); got != tc.want {
			t.Errorf("stripe %s, pieces %d+%d: %v, want %v", tc.stripe, tc.first, tc.n, got, tc.want)
		}
	}
}

// TestForestOriginCounted: in the forest, the root's decision to go to the
// origin is a clean miss, counted under its reason; a member whose sources
// answer but never build the artifact within the wait chooses as the chain
// does, and its decision is counted under the chain's reason.
func TestForestOriginCounted(t *testing.T) {
	_, identity := seededInPieces(t, 1)
	id, err := identity.ID()
	if err != nil {
		t.Fatal(err)
	}
	forest, ms := forestOf(t, id, 3)
	for _, m := range ms {
		serveOn(t, storetest.Open(t), ServerConfig{}, m.l) // nobody holds or builds it
	}
	for _, tc := range []struct {
		member *forestMember
		reason string
	}{
		{ms[0], "this node is the root of the striped forest"},
		{ms[1], "no source after the wait"},
	} {
		tc.member.p.RootWait = 300 * time.Millisecond
		_, _, err := tc.member.p.ProducerForID(context.Background(), id)
		if !errdefs.IsNotFound(err) {
			t.Fatalf("member %s (root %s): %v, want a clean miss", tc.member.addr, forest.Root(), err)
		}
		if got := testutil.ToFloat64(tc.member.p.originCounter().WithLabelValues(tc.reason)); got != 1 {
			t.Errorf("member %s: origin_total{reason=%q} = %v, want 1", tc.member.addr, tc.reason, got)
		}
	}
}

// TestForestRootAsksHeads: the root of the striped forest takes the
// artifact from a stripe head that holds it whole (the member that was the
// root before it joined), never from one that builds it, and only a root
// whose heads hold nothing goes to the origin, counted under its reason.
func TestForestRootAsksHeads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		head   string // what the head of stripe 1 has: "holds", "builds", or nothing
		origin float64
	}{
		{name: "a head holds it", head: "holds"},
		{name: "a head builds it", head: "builds", origin: 1},
		{name: "no head has it", origin: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, identity := seededInPieces(t, 1)
			id, err := identity.ID()
			if err != nil {
				t.Fatal(err)
			}
			_, ms := forestOf(t, id, 5)
			root, head := ms[0], ms[2]
			for _, m := range ms {
				if m == head && tc.head == "holds" {
					serveOn(t, a, ServerConfig{}, m.l)
					continue
				}
				m.d = storetest.Open(t)
				serveOn(t, m.d, ServerConfig{}, m.l)
			}
			if tc.head == "builds" {
				p := &delayedProducer{}
				built := startBuild(t, a, identity, p, head.d)
				// The build ends before its store's directory goes.
				t.Cleanup(func() { close(p.release); <-built })
			}
			_, prod, err := root.p.ProducerForID(context.Background(), id)
			got := testutil.ToFloat64(root.p.originCounter().WithLabelValues("this node is the root of the striped forest"))
			if got != tc.origin {
				t.Errorf("origin_total = %v, want %v", got, tc.origin)
			}
			if tc.origin > 0 {
				if !errdefs.IsNotFound(err) {
					t.Fatalf("root: %v, want a clean miss", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("root: %v", err)
			}
			l, _, err := root.d.GetOrBuild(context.Background(), identity, prod)
			if err != nil {
				t.Fatalf("root's fetch from the head: %v", err)
			}
			defer l.Close()
			if tr := prod.(*fetcher).Transfer(); tr.Endpoint != head.addr {
				t.Errorf("root fetched from %q, want the head %s", tr.Endpoint, head.addr)
			}
		})
	}
}
