package peer

import (
	"encoding/json"
	"testing"

	"github.com/weightsnap/weightsnap/internal/jsonobj"
)

// TestFetchReportJSON pins the names of `weightsnap peer fetch --json`: the
// one transfer shape, and every member the first encoding had.
func TestFetchReportJSON(t *testing.T) {
	rep := FetchReport{Request: "sha256:ab", Tensors: []string{"a.*"}, Peers: []string{"p:1", "q:2"}, Failovers: 1, Seconds: 2}
	rep.Built, rep.Endpoint, rep.Mode, rep.Rails, rep.Fetched, rep.Reused, rep.FetchSeconds = true, "q:2", "tcp", 4, 9, 3, 1.5
	for _, v := range []any{rep, &rep} {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"request":"sha256:ab","tensors":["a.*"],"identity":"","path":"","built":true,"files":0,"bytes":0,` +
			`"endpoint":"q:2","mode":"tcp","rails":4,"fetched_bytes":9,"reused_bytes":3,"reused_files":0,"resumed_files":0,"ranged":false,` +
			`"fetch_seconds":1.5,"publish_seconds":0,"peers":["p:1","q:2"],"failovers":1,"restarts":0,"seconds":2,"id":"","peer":"q:2"}`
		if string(raw) != want {
			t.Fatalf("fetch report\n got %s\nwant %s", raw, want)
		}
		old := `{"request":"sha256:ab","identity":"","id":"","path":"","tensors":["a.*"],"built":true,"files":0,"bytes":0,` +
			`"fetched_bytes":9,"reused_bytes":3,"peer":"q:2","peers":["p:1","q:2"],"mode":"tcp","rails":4,"failovers":1,"restarts":0,` +
			`"fetch_seconds":1.5,"publish_seconds":0,"seconds":2}`
		if lost, err := jsonobj.Missing([]byte(old), raw); err != nil || lost != nil {
			t.Fatalf("fetch report lost %q of the first encoding (%v)", lost, err)
		}
	}
}
