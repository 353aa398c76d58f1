package staging

import (
	"encoding/json"
	"testing"
	"time"
)

// encodeLedger writes exactly what json.MarshalIndent writes.
func TestEncodeLedgerIsMarshalIndent(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 6, time.UTC)
	blob := Entry{Path: "models--org--m/blobs/ab", Kind: EntryBlob, Size: 1 << 40, Digest: "sha256:ab", Sample: "cd", Verify: VerifyFull, Dev: 1<<64 - 1, Ino: 7, MtimeNs: -3}
	for _, tc := range []struct {
		name string
		l    Ledger
	}{
		{"no entries", Ledger{Schema: 1, ID: "a", Node: "n", State: StateStaged}},
		{"empty entries", Ledger{Schema: 1, ID: "a", Node: "n", State: StateStaging, Entries: []Entry{}}},
		{"every field", Ledger{Schema: 1, ID: "a", Node: "n<&>", Kind: KindHubMirror, Src: "/s", Dst: "/d", Verify: VerifySample,
			State: StateFailed, Error: "bad \"quote\"\n", StagedAt: at, LastUsed: at, Bytes: 9, Entries: []Entry{
				blob,
				{Path: "m/snapshots/c/a b/é\u2028<x>&\"\\\x01\xff", Kind: EntryLink, Target: "../../blobs/ab"},
				{Path: "m/refs/main", Kind: EntryFile},
				{Path: "r.safetensors", Kind: EntrySparse, Size: 100, Sample: "s", Ranges: []RangeRecord{{Table: "t<", Rows: [2]int64{1, 2}, Offset: 8, Length: 4, Digest: "blake3:x"}}},
				{Path: "z", Kind: EntryBlob, Size: 1, Target: "t", Digest: "d", Sample: "s", Verify: VerifySize, Dev: 1, Ino: 1, MtimeNs: 1},
			}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.MarshalIndent(&tc.l, "", " ")
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeLedger(&tc.l)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("encodeLedger:\n%s\nwant (json.MarshalIndent):\n%s", got, want)
			}
		})
	}
}
