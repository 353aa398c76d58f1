package sim

import (
	"bytes"
	"testing"
)

// calibrationBound is the largest relative error of the predicted p50 and p99 the calibration
// accepts at any N.
const calibrationBound = 0.10

// TestCalibration sets the model from testdata/measured.json (scripts/bench-fleet.sh, the command
// in the file), prints the measured and predicted tables side by side, and checks every round's
// predicted p50 and p99 within calibrationBound of the measured.
//
//	go test -run TestCalibration -v ./test/fleet/sim/
func TestCalibration(t *testing.T) {
	m, err := ReadMeasured("testdata/measured.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Calibrate(m)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	c.Print(&b)
	t.Logf("\n%s", b.String())
	for _, r := range c.Rows {
		for k, name := range []string{"p50", "p99"} {
			if e := (r.Predicted[k] - r.Measured[k]) / r.Measured[k]; e > calibrationBound || e < -calibrationBound {
				t.Errorf("%d nodes: predicted %s %.2fs, measured %.2fs: %+.1f%%, past %.0f%%", r.Nodes, name, r.Predicted[k], r.Measured[k], 100*e, 100*calibrationBound)
			}
		}
	}
}
