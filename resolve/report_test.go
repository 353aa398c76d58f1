package resolve_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/jsonobj"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// TestStepTransferJSON pins the names of a step's transfer in the report
// (`weightsnap resolve --report`): the one transfer shape, and every member
// the first encoding had (duration_ns, the transfer's bytes).
func TestStepTransferJSON(t *testing.T) {
	s := resolve.Step{Name: resolve.StepRemote, Source: "peer", Outcome: resolve.StepOK, Duration: 5,
		Transfer: &store.Transfer{Endpoint: "10.0.0.7:7420", Mode: "tcp", Rails: 4, Fetched: 42}}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"remote","source":"peer","outcome":"ok","seconds":5e-9,"duration_ns":5,` +
		`"transfer":{"endpoint":"10.0.0.7:7420","mode":"tcp","rails":4,"fetched_bytes":42,"reused_bytes":0,"reused_files":0,"resumed_files":0,` +
		`"ranged":false,"fetch_seconds":0,"publish_seconds":0,"bytes":42}}`
	if string(raw) != want {
		t.Fatalf("step\n got %s\nwant %s", raw, want)
	}
	old := `{"name":"remote","source":"peer","outcome":"ok","duration_ns":5,` +
		`"transfer":{"endpoint":"10.0.0.7:7420","mode":"tcp","rails":4,"bytes":42}}`
	if lost, err := jsonobj.Missing([]byte(old), raw); err != nil || lost != nil {
		t.Fatalf("step lost %q of the first encoding (%v)", lost, err)
	}
}

// TestReportDurationJSON: a report gives its duration in seconds, as every
// other report does, and still in nanoseconds.
func TestReportDurationJSON(t *testing.T) {
	raw, err := json.Marshal(resolve.Report{Duration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Seconds    *float64 `json:"seconds"`
		DurationNs *int64   `json:"duration_ns"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || got.Seconds == nil || *got.Seconds != 1.5 || got.DurationNs == nil || *got.DurationNs != 15e8 {
		t.Fatalf("report %s (%v)", raw, err)
	}
}
