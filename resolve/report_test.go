package resolve_test

import (
	"encoding/json"
	"testing"

	"github.com/weightsnap/weightsnap/resolve"
)

// TestStepTransferJSON pins the names of a step's transfer in the report
// (`weightsnap resolve --report`).
func TestStepTransferJSON(t *testing.T) {
	s := resolve.Step{Name: resolve.StepRemote, Source: "peer", Outcome: resolve.StepOK, DurationNs: 5,
		Transfer: &resolve.Transfer{Endpoint: "10.0.0.7:7420", Mode: "tcp", Rails: 4, Bytes: 42}}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"remote","source":"peer","outcome":"ok","duration_ns":5,` +
		`"transfer":{"endpoint":"10.0.0.7:7420","mode":"tcp","rails":4,"bytes":42}}`
	if string(raw) != want {
		t.Fatalf("step\n got %s\nwant %s", raw, want)
	}
}
