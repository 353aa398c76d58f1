package peer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/peer/stripes"
)

// TestStripeWatch: a stripe turns slow once its rate of verified bytes
// stayed below slowFraction of the median of the other stripes' rates for
// the watch's time twice for each hop of its depth; never when every stripe slows or
// stalls together, nor within that fraction, nor before its session has
// had a whole window; a stripe that finished keeps its last rate, or its
// rate since the first look when it finished within the first window; with no
// adopter the stripe is judged again a depth's time later; a stripe is
// taken over at most maxSlowLeaves times.
func TestStripeWatch(t *testing.T) {
	const (
		after = time.Second
		tick  = after / 4
		total = 100 << 20
	)
	// left is each stripe's bytes left at at, each at its rate from its
	// start.
	left := func(at time.Duration, rates []float64, starts []time.Duration) []int64 {
		out := make([]int64, len(rates))
		for s, r := range rates {
			done := int64(r * max(at-starts[s], 0).Seconds())
			out[s] = max(total-done, 0)
		}
		return out
	}
	const mb = 1 << 20
	for _, tc := range []struct {
		name    string
		rates   []float64       // each stripe's bytes a second
		starts  []time.Duration // when each stripe's bytes begin to flow (nil: at 0)
		depth   []int
		session time.Duration // when stripe 1's session begins
		busy    int           // how many times no adopter answers before one does
		until   time.Duration
		slowAt  []time.Duration // the looks at which stripe 1 turns slow
	}{
		{name: "a tenth of the other's rate", rates: []float64{10 * mb, mb}, depth: []int{1, 1}, until: 7 * after / 2,
			slowAt: []time.Duration{3 * after}},
		{name: "deeper, it waits twice its depth in windows", rates: []float64{10 * mb, mb}, depth: []int{1, 3}, until: 8 * after,
			slowAt: []time.Duration{7 * after}},
		{name: "below a third of the median of three", rates: []float64{10 * mb, 2 * mb, 8 * mb}, depth: []int{1, 1, 1}, until: 7 * after / 2,
			slowAt: []time.Duration{3 * after}},
		{name: "within a third of the other", rates: []float64{10 * mb, 4 * mb}, depth: []int{1, 1}, until: 6 * after},
		{name: "every stripe slow together", rates: []float64{mb / 10, mb / 10}, depth: []int{1, 1}, until: 6 * after},
		{name: "every stripe stalled", rates: []float64{0, 0}, depth: []int{1, 1}, until: 6 * after},
		{name: "waiting for its first bytes", rates: []float64{10 * mb, 10 * mb}, starts: []time.Duration{0, 3 * after / 2},
			depth: []int{1, 1}, until: 6 * after},
		{name: "the other finished: its last rate stays", rates: []float64{80 * mb, mb}, depth: []int{1, 1}, until: 7 * after / 2,
			slowAt: []time.Duration{3 * after}},
		{name: "stalled, the other finished within the first window", rates: []float64{400 * mb, 0}, depth: []int{1, 1},
			until: 7 * after / 2, slowAt: []time.Duration{3 * after}},
		{name: "a session younger than the window", rates: []float64{10 * mb, mb}, depth: []int{1, 1}, session: 3 * after / 2,
			until: 5 * after, slowAt: []time.Duration{9 * after / 2}},
		{name: "no adopter: judged again later", rates: []float64{10 * mb, mb}, depth: []int{1, 1}, busy: 1, until: 6 * after,
			slowAt: []time.Duration{3 * after, 5 * after}},
		{name: "taken over twice at most", rates: []float64{20 * mb, mb / 2}, depth: []int{1, 1}, until: 9 * after,
			slowAt: []time.Duration{3 * after, 6 * after}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			starts := tc.starts
			if starts == nil {
				starts = make([]time.Duration, len(tc.rates))
			}
			w := newStripeWatch(after, tc.depth)
			t0 := time.Unix(0, 0)
			var ended []context.Context
			begin := func(s int, at time.Duration) {
				ctx, cancel := context.WithCancelCause(context.Background())
				w.session(s, "source", cancel, t0.Add(at))
				if s == 1 {
					ended = append(ended, ctx)
				}
			}
			for s := range tc.rates {
				if s != 1 || tc.session == 0 {
					begin(s, 0)
				}
			}
			var got []time.Duration
			busy := tc.busy
			for at := time.Duration(0); at <= tc.until; at += tick {
				if tc.session > 0 && at == tc.session {
					begin(1, at)
				}
				for _, s := range w.observe(t0.Add(at), left(at, tc.rates, starts)) {
					if s != 1 {
						t.Fatalf("at %v: stripe %d turned slow", at, s)
					}
					got = append(got, at)
					if busy > 0 {
						busy--
						w.relieved(s, nil, t0.Add(at))
						continue
					}
					w.relieved(s, pipeSession(t), t0.Add(at))
					if cs := w.takeHandoff(s); cs == nil {
						t.Fatalf("at %v: no adopter's session handed over", at)
					} else {
						cs.close()
					}
					if cause := context.Cause(ended[len(ended)-1]); cause != errSlowSource {
						t.Fatalf("at %v: the slow session ended with %v, want %v", at, cause, errSlowSource)
					}
					begin(1, at)
				}
			}
			if len(got) != len(tc.slowAt) || !equalDurations(got, tc.slowAt) {
				t.Fatalf("stripe 1 turned slow at %v, want %v", got, tc.slowAt)
			}
		})
	}
}

func equalDurations(a, b []time.Duration) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// pipeSession is a client session over one end of a pipe.
func pipeSession(t *testing.T) *clientSession {
	c, other := net.Pipe()
	t.Cleanup(func() { other.Close() })
	return &clientSession{addr: "adopter", conn: c}
}

// TestStripeWatchEnded: an adopter's session that arrives once the
// stripe's fetch ended, or between its sessions, is closed, not handed
// over.
func TestStripeWatchEnded(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(w *stripeWatch)
	}{
		{"the stripe's fetch ended", func(w *stripeWatch) { w.end(0) }},
		{"between sessions", func(w *stripeWatch) { w.takeHandoff(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newStripeWatch(time.Second, []int{1, 1})
			_, cancel := context.WithCancelCause(context.Background())
			w.session(0, "source", cancel, time.Unix(0, 0))
			tc.end(w)
			cs := pipeSession(t)
			w.relieved(0, cs, time.Unix(1, 0))
			if got := w.takeHandoff(0); got != nil {
				t.Fatal("an adopter's session was handed over")
			}
			if _, err := cs.conn.Write([]byte{0}); err == nil {
				t.Fatal("the adopter's session is open")
			}
		})
	}
}

// TestSlowAdopters: the members that may take a stripe over from a slow
// source begin with the forest's adopters of its children, end with the
// root, hold each member once, and hold neither the slow source nor the
// member itself; past the forest's adopters, none is below the slow source
// in the stripe.
func TestSlowAdopters(t *testing.T) {
	id := artifact.MustParseID("sha256:" + strings.Repeat("5a", 32))
	var addrs []string
	for i := range 40 {
		addrs = append(addrs, fmt.Sprintf("10.0.0.%d:7420", i+1))
	}
	forest, err := stripes.Place(id, addrs, stripes.DefaultStripes)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, self := range forest.Ranking()[1:] {
		for s := range forest.Stripes() {
			src := forest.Parent(self, s)
			if src == forest.Root() {
				continue
			}
			f := &fetcher{forest: &forestPlan{forest: forest, self: self}}
			got := f.slowAdopters(src, s)
			direct := slices.DeleteFunc(forest.Adopters(self, src, s), func(a string) bool { return a == self })
			if len(got) < len(direct) || !slices.Equal(got[:len(direct)], direct) || got[len(got)-1] != forest.Root() {
				t.Fatalf("%s, stripe %d, source %s: %v, want %v first and the root last", self, s, src, got, direct)
			}
			for i, a := range got {
				if a == src || a == self || slices.Index(got, a) != i || (i >= len(direct) && below(forest, a, src, s)) {
					t.Fatalf("%s, stripe %d, source %s: %v holds %s", self, s, src, got, a)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no member has a source below the root")
	}
}

// below says whether m takes stripe s through src.
func below(forest *stripes.Forest, m, src string, s int) bool {
	for p := forest.Parent(m, s); p != ""; p = forest.Parent(p, s) {
		if p == src {
			return true
		}
	}
	return false
}

// TestSlowChildren: a server serves maxSlowChildren sessions of a stripe
// that took it over from a slow source and answers the next busy, while
// sessions of the stripe that are not marked slow, and slow ones of
// another stripe, are still served.
func TestSlowChildren(t *testing.T) {
	s, id := seededInPieces(t, 1)
	_, addr := serve(t, s, ServerConfig{})
	digest, err := id.ID()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func(stripe int, slow bool) error {
		cs, err := openSession(ctx, ClientConfig{}.withDefaults(), addr, wire.Request{ID: digest, Stripe: wire.Stripe{Index: stripe, Count: 2}, Slow: slow})
		if err == nil {
			t.Cleanup(cs.close)
		}
		return err
	}
	for i := range maxSlowChildren {
		if err := open(0, true); err != nil {
			t.Fatalf("slow session %d of stripe 0: %v", i, err)
		}
	}
	if err := open(0, true); !isBusy(err) || !strings.Contains(err.Error(), "slow source") {
		t.Fatalf("slow session past %d of stripe 0: %v, want busy", maxSlowChildren, err)
	}
	if err := open(0, false); err != nil {
		t.Fatalf("a session of stripe 0 not marked slow: %v", err)
	}
	if err := open(1, true); err != nil {
		t.Fatalf("a slow session of stripe 1: %v", err)
	}
}
