package peer

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestStripeWatch: a stripe's session ends with errSlowSource once the
// stripe trailed the median by slowMargin for the watch's time, or verified
// nothing for it while the other stripes verified stallMoved units or
// finished; never while it only waits its turn on a slow link, nor when
// every stripe stalls together.
func TestStripeWatch(t *testing.T) {
	const after = time.Second
	type look struct {
		at   time.Duration
		left []int
	}
	// slowLink is three stripes that each verify one unit every two
	// watch times, in turn.
	var slowLink []look
	left := []int{20, 20, 20}
	for i := range 24 {
		if i%8 < 3 {
			left[i%8]--
		}
		slowLink = append(slowLink, look{time.Duration(i) * after / 4, append([]int(nil), left...)})
	}
	for _, tc := range []struct {
		name  string
		total []int
		looks []look
		ended int // the look at which stripe 1's session ends slow; -1 never
	}{
		{"far behind for the watch's time", []int{10, 10}, []look{
			{0, []int{2, 9}}, {after / 2, []int{1, 9}}, {after, []int{0, 9}}, {2 * after, []int{0, 9}},
		}, 2},
		{"stalled near the end while the others finish", []int{10, 10, 10}, []look{
			{0, []int{1, 1, 1}}, {after / 2, []int{0, 1, 0}}, {after, []int{0, 1, 0}},
		}, 2},
		{"stalled while the other moves", []int{20, 20}, []look{
			{0, []int{18, 18}}, {after / 4, []int{15, 18}}, {after / 2, []int{12, 18}}, {3 * after / 4, []int{9, 18}}, {after, []int{6, 18}},
		}, 4},
		{"waiting its turn on a slow link", []int{20, 20, 20}, slowLink, -1},
		{"every stripe stalls together", []int{10, 10}, []look{
			{0, []int{7, 9}}, {after, []int{7, 9}}, {2 * after, []int{7, 9}}, {4 * after, []int{7, 9}},
		}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newStripeWatch(after, tc.total)
			causes := make([]context.Context, len(tc.total))
			for s := range causes {
				ctx, cancel := context.WithCancelCause(context.Background())
				causes[s] = ctx
				w.session(s, cancel)
			}
			t0 := time.Unix(0, 0)
			for i, l := range tc.looks {
				w.observe(t0.Add(l.at), l.left)
				slow := errors.Is(context.Cause(causes[1]), errSlowSource)
				if want := tc.ended >= 0 && i >= tc.ended; slow != want {
					t.Fatalf("look %d at %v: stripe 1 ended slow: %v, want %v", i, l.at, slow, want)
				}
				for s, ctx := range causes {
					if s != 1 && ctx.Err() != nil {
						t.Fatalf("look %d at %v: stripe %d ended: %v", i, l.at, s, context.Cause(ctx))
					}
				}
			}
		})
	}
}
