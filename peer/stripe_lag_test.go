package peer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestLagging: a stripe lags when its share trails the median of the
// member's stripes by more than slowMargin, or trails it and stalled.
func TestLagging(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shares  []float64
		stalled []bool
		want    []bool
	}{
		{"one stripe", []float64{0.1}, []bool{true}, []bool{false}},
		{"all alike", []float64{0.5, 0.5, 0.5}, []bool{true, true, true}, []bool{false, false, false}},
		{"far behind", []float64{0.9, 0.1, 0.8}, []bool{false, false, false}, []bool{false, true, false}},
		{"a little behind, moving", []float64{0.9, 0.8, 0.9}, []bool{false, false, false}, []bool{false, false, false}},
		{"a little behind, stalled", []float64{1, 0.95, 1}, []bool{false, true, false}, []bool{false, true, false}},
		{"ahead and stalled", []float64{0.5, 0.9, 0.5}, []bool{false, true, false}, []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lagging(tc.shares, tc.stalled); !slices.Equal(got, tc.want) {
				t.Errorf("lagging(%v, %v) = %v, want %v", tc.shares, tc.stalled, got, tc.want)
			}
		})
	}
}

// TestStripeWatch: a stripe's session ends with errSlowSource once the
// stripe lagged for the watch's time on end, and not before.
func TestStripeWatch(t *testing.T) {
	after := time.Second
	w := newStripeWatch(after, []int{10, 10})
	var causes [2]context.Context
	for s := range causes {
		ctx, cancel := context.WithCancelCause(context.Background())
		causes[s] = ctx
		w.session(s, cancel)
	}
	t0 := time.Unix(0, 0)
	// Stripe 1 stalls while stripe 0 moves, then finishes.
	for _, step := range []struct {
		at   time.Duration
		left []int
		slow bool // stripe 1's session ended slow
	}{
		{0, []int{2, 9}, false},         // it begins to lag
		{after / 2, []int{1, 9}, false}, // lagging, not for long enough
		{after, []int{0, 9}, true},      // lagged for after
		{2 * after, []int{0, 9}, true},  // ended once
	} {
		w.observe(t0.Add(step.at), step.left)
		if got := errors.Is(context.Cause(causes[1]), errSlowSource); got != step.slow {
			t.Fatalf("at %v: stripe 1 ended slow: %v, want %v", step.at, got, step.slow)
		}
		if causes[0].Err() != nil {
			t.Fatalf("at %v: stripe 0, ahead, ended: %v", step.at, context.Cause(causes[0]))
		}
	}
}

// TestStripeWatchSharedStall: stripes that all stall together are held
// back by something they share, so no session ends.
func TestStripeWatchSharedStall(t *testing.T) {
	after := time.Second
	w := newStripeWatch(after, []int{10, 10})
	ctx, cancel := context.WithCancelCause(context.Background())
	w.session(1, cancel)
	t0 := time.Unix(0, 0)
	w.observe(t0, []int{7, 9})
	for i := range 4 {
		w.observe(t0.Add(time.Duration(i+1)*after), []int{7, 9})
	}
	if err := context.Cause(ctx); err != nil {
		t.Fatalf("stripe 1 ended while every stripe stalled: %v", err)
	}
}
