package peer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// The slow source routed around: a striped fetch measures each stripe's
// rate of verified bytes over the last SlowAfter. A stripe is slow when
// its rate stays below slowFraction of the median of the member's other
// stripes' rates, on end, for SlowAfter twice for each hop of the member's
// depth in the stripe: the member nearest a slow source moves first, and
// those below it recover with it before their own time is up. When every
// stripe slows together the median falls with it and nobody moves (the
// member's link, not a source). A slow stripe asks the slow source's
// adopters in the forest, then its source's, and so on up to the root,
// for a session marked slow; a server serves maxSlowChildren of those a
// stripe and answers busy past them. The first that answers takes the
// stripe over, with the pieces verified kept, and only then does the slow
// source's session end; with none, the stripe stays with its source. A
// stripe leaves a slow source at most maxSlowLeaves times in one fetch.
// The model (test/fleet/sim) stands for this rule with Params.SlowAfter:
// a slow source's children there leave it at one instant.

// slowFraction is the share of the median of the member's other stripes'
// rates below which a stripe's rate is slow.
const slowFraction = 1.0 / 3

// maxSlowLeaves is how many times a stripe leaves a slow source in one
// fetch.
const maxSlowLeaves = 2

// errSlowSource is the cause of a stripe's session ended because an
// adopter took the stripe over from its slow source.
var errSlowSource = errors.New("the stripe's source is slow; an adopter took the stripe over")

// rateSample is each stripe's bytes left to verify at one instant.
type rateSample struct {
	at   time.Time
	left []int64
}

// stripeWatch is a striped fetch's watch over its stripes' rates.
type stripeWatch struct {
	after time.Duration
	depth []int // this member's hops from the root in each stripe

	mu      sync.Mutex
	first   rateSample   // the first look
	samples []rateSample // the last after's, and the newest before them
	// rate is each stripe's bytes a second over the last window it was
	// busy throughout, or since the first look for one that finished
	// before a whole window; -1 before either.
	rate    []float64
	stripes []watchedStripe // each stripe's session and its record of slow sources
}

// watchedStripe is one stripe's session as the watch sees it.
type watchedStripe struct {
	src       string // the session's source
	cancel    context.CancelCauseFunc
	began     time.Time // when the session began
	since     time.Time // when its rate fell below slowFraction of the median; zero while it is not
	relieving bool      // an adopter is being asked
	handoff   *clientSession
	done      bool     // the stripe's fetch ended
	slow      []string // the sources it left as slow
}

func newStripeWatch(after time.Duration, depth []int) *stripeWatch {
	w := &stripeWatch{after: after, depth: depth, rate: make([]float64, len(depth)), stripes: make([]watchedStripe, len(depth))}
	for s := range w.rate {
		w.rate[s] = -1
	}
	return w
}

// session records stripe s's session with src from now, ended by cancel.
func (w *stripeWatch) session(s int, src string, cancel context.CancelCauseFunc, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &w.stripes[s]
	st.src, st.cancel, st.began, st.since = src, cancel, now, time.Time{}
}

// observe takes each stripe's bytes left at now and says which stripes
// turned slow: each is marked as asking an adopter until relieved says
// how that went.
func (w *stripeWatch) observe(now time.Time, left []int64) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples = append(w.samples, rateSample{at: now, left: left})
	if w.first.left == nil {
		w.first = w.samples[0]
	}
	for s, n := range left {
		if since := now.Sub(w.first.at); n == 0 && w.rate[s] < 0 && w.first.left[s] > 0 && since > 0 {
			w.rate[s] = float64(w.first.left[s]) / since.Seconds()
		}
	}
	for len(w.samples) > 1 && now.Sub(w.samples[1].at) >= w.after {
		w.samples = w.samples[1:]
	}
	base := w.samples[0]
	window := now.Sub(base.at)
	if window < w.after {
		return nil
	}
	for s, n := range left {
		if n > 0 {
			w.rate[s] = float64(base.left[s]-n) / window.Seconds()
		}
	}
	var slow []int
	for s, n := range left {
		st := &w.stripes[s]
		median := medianOf(w.othersRates(s))
		if n == 0 || st.cancel == nil || st.relieving || len(st.slow) >= maxSlowLeaves ||
			st.began.After(base.at) || median <= 0 || w.rate[s] >= slowFraction*median {
			st.since = time.Time{}
			continue
		}
		if st.since.IsZero() {
			st.since = now
		}
		if now.Sub(st.since) >= time.Duration(2*max(w.depth[s], 1))*w.after {
			st.relieving = true
			slow = append(slow, s)
		}
	}
	return slow
}

// othersRates are the rates of the stripes other than s that have one.
func (w *stripeWatch) othersRates(s int) []float64 {
	var out []float64
	for o, r := range w.rate {
		if o != s && r >= 0 {
			out = append(out, r)
		}
	}
	return out
}

// source is stripe s's source and the sources it left as slow.
func (w *stripeWatch) source(s int) (string, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &w.stripes[s]
	return st.src, slices.Clone(st.slow)
}

// relieved ends asking an adopter for stripe s: with cs, the adopter's
// session, the slow source's session ends and cs waits for the stripe
// (handoff); without, the stripe stays and its lag counts from now.
func (w *stripeWatch) relieved(s int, cs *clientSession, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &w.stripes[s]
	st.relieving, st.since = false, now
	if cs == nil {
		return
	}
	if st.done || st.cancel == nil {
		cs.close()
		return
	}
	st.slow = append(st.slow, st.src)
	st.handoff = cs
	st.cancel(errSlowSource)
	st.cancel = nil
}

// takeHandoff is the adopter's session that took stripe s over, nil for
// none.
func (w *stripeWatch) takeHandoff(s int) *clientSession {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &w.stripes[s]
	cs := st.handoff
	st.handoff, st.cancel = nil, nil
	return cs
}

// end records that stripe s's fetch ended: an adopter's session that
// arrives after is closed.
func (w *stripeWatch) end(s int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &w.stripes[s]
	st.done, st.cancel = true, nil
	if st.handoff != nil {
		st.handoff.close()
		st.handoff = nil
	}
}

// medianOf is the median of xs, or 0 for none.
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(xs))
	n := len(sorted)
	return (sorted[(n-1)/2] + sorted[n/2]) / 2
}

// watchStripes observes the stripes' rates from now and every quarter of
// w.after until ctx ends, and asks an adopter for each stripe that turned
// slow.
func (f *fetcher) watchStripes(ctx context.Context, w *stripeWatch) {
	w.observe(time.Now(), f.stripeBytesLeft())
	t := time.NewTicker(w.after / 4)
	defer t.Stop()
	var asks sync.WaitGroup
	defer asks.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, s := range w.observe(now, f.stripeBytesLeft()) {
				asks.Go(func() { w.relieved(s, f.askAdopter(ctx, w, s), time.Now()) })
			}
		}
	}
}

// askAdopter opens a session marked slow for stripe s with the first of
// slowAdopters that answers, passing over this node, the sources the
// stripe left as slow and the peers remembered as down; nil when none
// answers (each busy, say).
func (f *fetcher) askAdopter(ctx context.Context, w *stripeWatch, s int) *clientSession {
	fp := f.forest
	src, slow := w.source(s)
	for _, a := range f.slowAdopters(src, s) {
		if slices.Contains(slow, a) || f.o.Client.Down.down(a) {
			continue
		}
		cs, err := f.openStripe(ctx, a, fp.stripe(s), true)
		if err == nil {
			return cs
		}
		log.G(ctx).WithError(err).WithField("peer", a).WithField("stripe", fp.stripe(s).String()).
			Debug("peer: an adopter did not take over a slow stripe")
	}
	log.G(ctx).WithField("peer", src).WithField("stripe", fp.stripe(s).String()).
		Debug("peer: the stripe's source is slow, and no adopter took it over; staying with it")
	return nil
}

// slowAdopters are the members, each once, that may take stripe s over
// from its slow source src for this node: the forest's adopters of src's
// children, then of its source's, and so on up to the root.
func (f *fetcher) slowAdopters(src string, s int) []string {
	fp := f.forest
	var out []string
	members := len(fp.forest.Ranking())
	for m, hops := src, 0; m != "" && hops < members; m, hops = fp.forest.Parent(m, s), hops+1 {
		for _, a := range fp.forest.Adopters(fp.self, m, s) {
			if a != src && a != fp.self && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// stripeBytesLeft are each stripe's bytes not verified yet: a unit not
// in pieces yet counts each of its pieces to that piece's stripe.
func (f *fetcher) stripeBytesLeft() []int64 {
	k := int64(f.forest.forest.Stripes())
	left := make([]int64, k)
	for _, u := range f.units.remaining() {
		switch {
		case u.parent != nil:
			left[(u.parent.first+u.piece)%k] += u.n
		default:
			for i := range blake3.Pieces(u.n) {
				left[(u.first+i)%k] += min(blake3.PieceSize, u.n-i*blake3.PieceSize)
			}
		}
	}
	return left
}
