package oci

import (
	"encoding/json"
	"testing"

	"github.com/weightsnap/weightsnap/internal/jsonobj"
)

// TestPullReportJSON pins the names of `weightsnap pull --json`: the one
// transfer shape, and every member the first encoding had.
func TestPullReportJSON(t *testing.T) {
	var rep PullReport
	rep.Ref, rep.Fetched, rep.Ranged = "reg/m:v", 7, true
	raw, err := json.Marshal(&rep)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"ref":"reg/m:v","manifest":"","kind":"","identity":"","path":"","built":false,"files":0,"bytes":0,` +
		`"fetched_bytes":7,"reused_bytes":0,"reused_files":0,"resumed_files":0,"ranged":true,"fetch_seconds":0,"publish_seconds":0,"seconds":0,"id":""}`
	if string(raw) != want {
		t.Fatalf("pull report\n got %s\nwant %s", raw, want)
	}
	old := `{"ref":"reg/m:v","manifest":"","kind":"","identity":"","id":"","path":"","built":false,"files":0,"bytes":0,` +
		`"fetched_bytes":7,"reused_bytes":0,"reused_files":0,"ranged":true,"fetch_seconds":0,"publish_seconds":0,"seconds":0}`
	if lost, err := jsonobj.Missing([]byte(old), raw); err != nil || lost != nil {
		t.Fatalf("pull report lost %q of the first encoding (%v)", lost, err)
	}
}
