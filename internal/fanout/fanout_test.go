package fanout

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// TestEach: every index is called exactly once, whatever the runs and the
// limit, and the error returned is the lowest failing index's.
func TestEach(t *testing.T) {
	for _, tc := range []struct {
		n, minRun, limit int
		fail             []int // indexes that fail
		want             int   // the index whose error is returned; -1: none
	}{
		{0, 64, 8, nil, -1},
		{1, 64, 8, nil, -1},
		{63, 64, 8, nil, -1},
		{1000, 64, 8, nil, -1},
		{1000, 1, 1000, nil, -1},
		{1000, 0, 4, nil, -1},
		{1000, 64, 8, []int{999, 3, 500}, 3},
		{1000, 64, 8, []int{700}, 700},
		{10, 64, 8, []int{9, 4}, 4},
	} {
		t.Run(fmt.Sprintf("%d/%d/%d/%v", tc.n, tc.minRun, tc.limit, tc.fail), func(t *testing.T) {
			calls := make([]atomic.Int32, tc.n)
			fails := map[int]bool{}
			for _, i := range tc.fail {
				fails[i] = true
			}
			err := each(tc.n, tc.minRun, tc.limit, func(i int) error {
				calls[i].Add(1)
				if fails[i] {
					return fmt.Errorf("index %d: %w", i, errIndex)
				}
				return nil
			})
			if tc.want < 0 {
				if err != nil {
					t.Fatal(err)
				}
				for i := range calls {
					if c := calls[i].Load(); c != 1 {
						t.Fatalf("index %d called %d times", i, c)
					}
				}
				return
			}
			if want := fmt.Sprintf("index %d: %v", tc.want, errIndex); err == nil || err.Error() != want || !errors.Is(err, errIndex) {
				t.Fatalf("error %v, want %s", err, want)
			}
			for i := range calls {
				if c := calls[i].Load(); c > 1 {
					t.Fatalf("index %d called %d times", i, c)
				}
			}
		})
	}
}

var errIndex = errors.New("failed")
