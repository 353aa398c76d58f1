package staging

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// encodeLedger writes exactly what json.MarshalIndent writes.
func TestEncodeLedgerIsMarshalIndent(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 6, time.UTC)
	blob := Entry{Path: "models--org--m/blobs/ab", Kind: EntryBlob, Size: 1 << 40, Digest: "sha256:ab", Sample: "cd", Verify: VerifyFull, Dev: 1<<64 - 1, Ino: 7, MtimeNs: -3}
	for _, tc := range []struct {
		name    string
		l       Ledger
		escapes bool
	}{
		{"no entries", Ledger{Schema: 1, ID: "a", Node: "n", State: StateStaged}, false},
		{"empty entries", Ledger{Schema: 1, ID: "a", Node: "n", State: StateStaging, Entries: []Entry{}}, false},
		{"every field", Ledger{Schema: 1, ID: "a", Node: "n<&>", Kind: KindHubMirror, Src: "/s", Dst: "/d", Verify: VerifySample,
			State: StateFailed, Error: "bad \"quote\"\n", StagedAt: at, LastUsed: at, Bytes: 9, Entries: []Entry{
				blob,
				{Path: "m/snapshots/c/a b/é\u2028<x>&\"\\\x01\xff", Kind: EntryLink, Target: "../../blobs/ab"},
				{Path: "m/refs/main", Kind: EntryFile},
				{Path: "r.safetensors", Kind: EntrySparse, Size: 100, Sample: "s", Ranges: []RangeRecord{{Table: "t<", Rows: [2]int64{1, 2}, Offset: 8, Length: 4, Digest: "blake3:x"}}},
				{Path: "z", Kind: EntryBlob, Size: 1, Target: "t", Digest: "d", Sample: "s", Verify: VerifySize, Dev: 1, Ino: 1, MtimeNs: 1},
			}}, true},
		{"ascii", Ledger{Schema: 1, ID: "a", Node: "n", Kind: KindHubMirror, Src: "/s", Dst: "/d", Verify: VerifyFull, State: StateStaged,
			StagedAt: at, LastUsed: at.Add(time.Hour), Bytes: 9, Entries: []Entry{
				blob,
				{Path: "m/snapshots/c/a b", Kind: EntryLink, Target: "../../blobs/ab"},
				{Path: "r.safetensors", Kind: EntrySparse, Size: 100, Sample: "s", Ranges: []RangeRecord{{Table: "t", Rows: [2]int64{-1, 2}, Offset: 8, Length: 4, Digest: "blake3:x"}, {}}},
			}}, false},
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
			// fastLedger reads it as encoding/json does, or leaves it to
			// encoding/json (only where a string needs escapes).
			var std Ledger
			if err := json.Unmarshal(got, &std); err != nil {
				t.Fatal(err)
			}
			fast, ok := fastLedger(got)
			if ok != !tc.escapes || (ok && !reflect.DeepEqual(fast, &std)) {
				t.Fatalf("fastLedger: ok %v, %+v; encoding/json: %+v", ok, fast, std)
			}
		})
	}
}
