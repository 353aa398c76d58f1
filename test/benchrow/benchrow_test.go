package benchrow

import (
	"os"
	"testing"
)

func TestRuns(t *testing.T) {
	for _, tc := range []struct {
		name             string
		runs             Runs
		median, min, max float64
		wide             bool
		format           string
	}{
		{"none", nil, 0, 0, 0, false, "0.00 [0.00-0.00]"},
		{"odd", Runs{3, 1, 2, 5, 4}, 3, 1, 5, true, "3.00 [1.00-5.00]"},
		{"even", Runs{1.0, 1.2, 1.1, 1.3}, 1.15, 1.0, 1.3, false, "1.15 [1.00-1.30]"},
		{"just wide", Runs{1.0, 1.31}, 1.155, 1.0, 1.31, true, "1.16 [1.00-1.31]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.runs.Median(); got != tc.median {
				t.Errorf("Median = %v, want %v", got, tc.median)
			}
			if got := tc.runs.Min(); got != tc.min {
				t.Errorf("Min = %v, want %v", got, tc.min)
			}
			if got := tc.runs.Max(); got != tc.max {
				t.Errorf("Max = %v, want %v", got, tc.max)
			}
			if got := tc.runs.Wide(); got != tc.wide {
				t.Errorf("Wide = %v, want %v", got, tc.wide)
			}
			if got := tc.runs.Format(2); got != tc.format {
				t.Errorf("Format(2) = %q, want %q", got, tc.format)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		name     string
		num, den Runs
		want     string
	}{
		{"tight", Runs{10, 11, 12}, Runs{2, 2.2, 2.4}, "5.00 [4.17-6.00]x"},
		{"contender spreads", Runs{10, 20, 35}, Runs{3, 3, 3}, "6.67 [3.33-11.67]x; spread 3.50x"},
		{"no den", Runs{1}, nil, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ratio(tc.num, tc.den); got != tc.want {
				t.Errorf("Ratio = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReps(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
	}{{"", MinReps}, {"7", 7}, {"0", MinReps}, {"x", MinReps}} {
		t.Setenv("BENCH_REPS", tc.env)
		if got := Reps(); got != tc.want {
			t.Errorf("BENCH_REPS=%q: Reps = %d, want %d", tc.env, got, tc.want)
		}
	}
}

// TestDiskFloor: the floor writes every byte asked for, in the files asked
// for, and leaves none of them behind.
func TestDiskFloor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int64
		files int
	}{
		{"one file", 3<<20 + 5, 1},
		{"four files", 4 << 20, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			secs, err := DiskFloor(dir, tc.size, tc.files)
			if err != nil {
				t.Fatal(err)
			}
			if secs <= 0 {
				t.Errorf("DiskFloor took %v s", secs)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("DiskFloor left %d files behind", len(left))
			}
		})
	}
}
