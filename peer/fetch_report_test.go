package peer

import (
	"encoding/json"
	"testing"
)

// TestFetchReportJSON pins the names and order of `weightsnap peer fetch --json`.
func TestFetchReportJSON(t *testing.T) {
	rep := FetchReport{Request: "sha256:ab", Tensors: []string{"a.*"}, Built: true, Peers: []string{"p:1", "q:2"}, Failovers: 1, Seconds: 2}
	rep.Endpoint, rep.Mode, rep.Rails, rep.Fetched, rep.Reused, rep.FetchSeconds = "q:2", "tcp", 4, 9, 3, 1.5
	for _, v := range []any{rep, &rep} {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"request":"sha256:ab","identity":"","id":"","path":"","tensors":["a.*"],"built":true,"files":0,"bytes":0,` +
			`"fetched_bytes":9,"reused_bytes":3,"reused_files":0,"resumed_files":0,"peer":"q:2","peers":["p:1","q:2"],"mode":"tcp","rails":4,"failovers":1,"restarts":0,` +
			`"fetch_seconds":1.5,"publish_seconds":0,"seconds":2}`
		if string(raw) != want {
			t.Fatalf("fetch report\n got %s\nwant %s", raw, want)
		}
	}
}
