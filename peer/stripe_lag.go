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
// median of the member's stripes by more than slowMargin, or trails it and
// verified nothing since the last look while another stripe did or is done
// (a source that stalled near the end). A stripe that lags for SlowAfter on end leaves its source for an
// adopter, as a failed source's children do, with the pieces it verified
// kept. The model (test/fleet/sim, Params.SlowAfter) has the same rule.

// DefaultSlowAfter is how long a stripe may trail the member's other
// stripes before it leaves its source for an adopter.
const DefaultSlowAfter = 5 * time.Second

// slowMargin is the share of a stripe's pieces by which it trails the
// median of the member's stripes to count as lagging.
const slowMargin = 0.25

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
	since  []time.Time               // when each stripe began to lag; zero while it does not
}

func newStripeWatch(after time.Duration, total []int) *stripeWatch {
	return &stripeWatch{after: after, total: total, left: slices.Clone(total), cancel: make([]context.CancelCauseFunc, len(total)), since: make([]time.Time, len(total))}
}

// session records stripe s's session in flight, ended by cancel; the
// stripe's lag counts from then.
func (w *stripeWatch) session(s int, cancel context.CancelCauseFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel[s], w.since[s] = cancel, time.Time{}
}

// observe takes each stripe's units left at now and ends, with
// errSlowSource, the session of every stripe that lagged for w.after.
func (w *stripeWatch) observe(now time.Time, left []int) {
	shares := make([]float64, len(left))
	stalled := make([]bool, len(left))
	moved := 0 // stripes done, or that verified a piece since the last look
	for s, n := range left {
		shares[s] = 1 - float64(n)/float64(max(w.total[s], 1))
		stalled[s] = n > 0 && n >= w.left[s]
		if n == 0 || n < w.left[s] {
			moved++
		}
	}
	if moved == 0 {
		// No stripe moved or is done: what holds them back is shared
		// (this node, or the root), not one stripe's source.
		clear(stalled)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.left = slices.Clone(left)
	for s, lag := range lagging(shares, stalled) {
		switch {
		case !lag || w.cancel[s] == nil:
			w.since[s] = time.Time{}
		case w.since[s].IsZero():
			w.since[s] = now
		case now.Sub(w.since[s]) >= w.after:
			w.cancel[s](errSlowSource)
			w.cancel[s], w.since[s] = nil, time.Time{}
		}
	}
}

// lagging says which stripes lag: each trails the median of shares (a
// stripe's share of its pieces verified) by more than slowMargin, or
// trails it and stalled.
func lagging(shares []float64, stalled []bool) []bool {
	out := make([]bool, len(shares))
	if len(shares) < 2 {
		return out
	}
	sorted := slices.Sorted(slices.Values(shares))
	n := len(sorted)
	median := (sorted[(n-1)/2] + sorted[n/2]) / 2
	for s, x := range shares {
		out[s] = x < median-slowMargin || (x < median && stalled[s])
	}
	return out
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
