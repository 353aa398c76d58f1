// Package benchrow is a benchmark row of several runs: the median with the
// min and max, a ratio with the range the runs allow, and the spread that
// makes a ratio say little. The Go benchmarks print their rows with it; the
// scripts' rows come from scripts/bench-lib.sh, which formats them alike.
package benchrow

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// MinReps is how many runs a row is the median of unless BENCH_REPS says
// otherwise.
const MinReps = 5

// WideSpread is the max over min of a row's runs above which the row says
// that its runs spread too far for a ratio to mean much.
const WideSpread = 1.3

// Reps is the number of runs each row takes: BENCH_REPS, or MinReps when
// that is unset or not a positive number.
func Reps() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_REPS")); err == nil && n > 0 {
		return n
	}
	return MinReps
}

// Runs are the measurements of one row, one per run, in one unit.
type Runs []float64

// Median is the middle run, or the mean of the two middle runs; 0 for no runs.
func (r Runs) Median() float64 {
	if len(r) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(r))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Min is the least run; 0 for no runs.
func (r Runs) Min() float64 {
	if len(r) == 0 {
		return 0
	}
	return slices.Min(r)
}

// Max is the greatest run; 0 for no runs.
func (r Runs) Max() float64 {
	if len(r) == 0 {
		return 0
	}
	return slices.Max(r)
}

// Wide reports whether the runs spread more than WideSpread (max over min).
func (r Runs) Wide() bool {
	return r.Min() > 0 && r.Max()/r.Min() > WideSpread
}

// Format is "median [min-max]", each with prec decimals.
func (r Runs) Format(prec int) string {
	return fmt.Sprintf("%.*f [%.*f-%.*f]", prec, r.Median(), prec, r.Min(), prec, r.Max())
}

// List is every run, with prec decimals, separated by spaces.
func (r Runs) List(prec int) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = strconv.FormatFloat(v, 'f', prec, 64)
	}
	return strings.Join(s, " ")
}

// Ratio is num over den as "median [low-high]x": the ratio of the medians,
// and the range the runs allow, from num's min over den's max to num's max
// over den's min. A contender's time over weightsnap's (num the contender)
// reads as weightsnap's speedup, worst to best. A num whose runs spread wide
// adds "; spread" and its max over min.
func Ratio(num, den Runs) string {
	if den.Min() == 0 || den.Median() == 0 {
		return "-"
	}
	s := fmt.Sprintf("%.2f [%.2f-%.2f]x", num.Median()/den.Median(), num.Min()/den.Max(), num.Max()/den.Min())
	if num.Wide() {
		s += fmt.Sprintf("; spread %.2fx", num.Max()/num.Min())
	}
	return s
}
