package sim

import (
	"bytes"
	"testing"
)

// calibrationBound is the largest relative error of the predicted p50, p99 and max the
// calibration accepts at any N.
const calibrationBound = 0.10

// TestCalibration sets the model from each measurement in testdata (scripts/bench-fleet.sh's
// BENCH_FLEET_JSON, the command in the file): the chain's and the striped forest's. It prints the
// measured and predicted tables side by side and checks every round's predicted p50, p99 and max
// within calibrationBound of the measured.
//
//	go test -run TestCalibration -v ./test/fleet/sim/
func TestCalibration(t *testing.T) {
	for _, tc := range []struct {
		file   string
		forest bool
	}{
		{"testdata/measured.json", false},
		{"testdata/measured-forest.json", true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			m, err := ReadMeasured(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if forest := m.Structure == "forest"; forest != tc.forest {
				t.Fatalf("structure %q: a forest %v, want %v", m.Structure, forest, tc.forest)
			}
			c, err := Calibrate(m)
			if err != nil {
				t.Fatal(err)
			}
			if striped := c.Params.Stripes > 0; striped != tc.forest {
				t.Fatalf("the model of a %q measurement runs the striped forest: %v", m.Structure, striped)
			}
			var b bytes.Buffer
			c.Print(&b)
			t.Logf("\n%s", b.String())
			for _, r := range c.Rows {
				for k, name := range []string{"p50", "p99", "max"} {
					if e := (r.Predicted[k] - r.Measured[k]) / r.Measured[k]; e > calibrationBound || e < -calibrationBound {
						t.Errorf("%d nodes: predicted %s %.2fs, measured %.2fs: %+.1f%%, past %.0f%%", r.Nodes, name, r.Predicted[k], r.Measured[k], 100*e, 100*calibrationBound)
					}
				}
			}
		})
	}
}
