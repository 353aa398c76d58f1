package peer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// The slow source routed around: a striped fetch watches each stripe's
// share of its pieces verified. A stripe lags when its share trails the
// median of the member's stripes by more than slowMargin for SlowAfter on
// end, or when it trails the median and verified nothing for SlowAfter while
// the member's other stripes verified at least stallMoved units each (the
// median of them), or finished (a source that stalled near the end). Counted
// in units, the stall rule holds at any link rate: a stripe that waits its
// turn on a slow link is not a stalled one. A lagging stripe leaves its
// source for an adopter, as a failed source's children do, with the pieces
// it verified kept. The model (test/fleet/sim, Params.SlowAfter) has the
// same rule.

// slowMargin is the share of a stripe's pieces by which it trails the
// median of the member's stripes to count as lagging.
const slowMargin = 0.25

// stallMoved is how many units the member's other stripes verify, on the
// median, while a stripe verifies none, for that stripe to count as stalled.
const stallMoved = 2

// errSlowSource is the cause of a stripe's session ended because its
// source lags the member's other sources.
var errSlowSource = errors.New("the stripe's source lags the member's other sources")

// stripeWatch is a striped fetch's watch over its stripes' progress.
type stripeWatch struct {
	after time.Duration
	total []int // each stripe's units to fetch at the start

	mu     sync.Mutex
	left   []int                     // each stripe's units left at the last look
	cancel []context.CancelCauseFunc // each stripe's session in flight
	since  []time.Time               // when each stripe began to trail by slowMargin; zero while it does not
	moved  []time.Time               // when each stripe last verified a unit (or its session began); zero before the first look
	mark   [][]int                   // every stripe's units left at moved
}

func newStripeWatch(after time.Duration, total []int) *stripeWatch {
	n := len(total)
	return &stripeWatch{after: after, total: total, left: slices.Clone(total), cancel: make([]context.CancelCauseFunc, n),
		since: make([]time.Time, n), moved: make([]time.Time, n), mark: make([][]int, n)}
}

// session records stripe s's session in flight, ended by cancel; the
// stripe's lag counts from then.
func (w *stripeWatch) session(s int, cancel context.CancelCauseFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel[s], w.since[s], w.moved[s] = cancel, time.Time{}, time.Time{}
}

// observe takes each stripe's units left at now and ends, with
// errSlowSource, the session of every stripe that lagged for w.after.
func (w *stripeWatch) observe(now time.Time, left []int) {
	shares := make([]float64, len(left))
	for s, n := range left {
		shares[s] = 1 - float64(n)/float64(max(w.total[s], 1))
	}
	median := medianOf(shares)
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, n := range left {
		if w.moved[s].IsZero() || n < w.left[s] {
			w.moved[s], w.mark[s] = now, slices.Clone(left)
		}
	}
	w.left = slices.Clone(left)
	for s := range left {
		if w.cancel[s] == nil || left[s] == 0 || shares[s] >= median {
			w.since[s] = time.Time{}
			continue
		}
		far := shares[s] < median-slowMargin
		switch {
		case far && w.since[s].IsZero():
			w.since[s] = now
		case !far:
			w.since[s] = time.Time{}
		}
		trailed := far && now.Sub(w.since[s]) >= w.after
		stalled := now.Sub(w.moved[s]) >= w.after && othersMoved(w.mark[s], left, s) >= stallMoved
		if trailed || stalled {
			w.cancel[s](errSlowSource)
			w.cancel[s], w.since[s] = nil, time.Time{}
		}
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

// othersMoved is the median of the units the stripes other than s verified
// between mark and left; a stripe that finished counts as having moved
// enough. With no other stripe it is 0.
func othersMoved(mark, left []int, s int) int {
	var moved []int
	for o := range left {
		switch {
		case o == s:
		case left[o] == 0:
			moved = append(moved, stallMoved)
		default:
			moved = append(moved, mark[o]-left[o])
		}
	}
	if len(moved) == 0 {
		return 0
	}
	slices.Sort(moved)
	return moved[(len(moved)-1)/2]
}

// watchStripes observes the stripes' progress every quarter of w.after
// until ctx ends.
func (f *fetcher) watchStripes(ctx context.Context, w *stripeWatch) {
	t := time.NewTicker(w.after / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			left := make([]int, len(w.total))
			for s := range left {
				left[s] = len(f.stripeTodo(f.forest.stripe(s)))
			}
			w.observe(now, left)
		}
	}
}
