package staging

import (
	"bytes"
	"encoding/json"
	"io"
	"path"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// FuzzParseRecipe: any document parses to a valid recipe or fails with
// recipe errors; it never panics.
func FuzzParseRecipe(f *testing.F) {
	f.Add([]byte("[[staging]]\nid = \"a\"\nkind = \"hub-mirror\"\nsrc = \"/s\"\ndst = \"/d\"\nrepos = [\"o/n\"]\nskip = [\"x/*\"]\nmax_used = \"75%\"\n"))
	f.Add([]byte("[[staging]]\nid = \"e\"\nkind = \"sparse-rows\"\nsrc = \"/s\"\ndst = \"~/d\"\nrank = 1\nranks = 4\ntables = [{name = \"t\", rows = \"0:10\"}]\n[[staging.tables]]\nname = \"u\"\n"))
	f.Add([]byte("staging = [{id = \"a\", kind = \"hub-mirror\", src = \"/s\", dst = \"/d\", bad = 1}]\n"))
	f.Add([]byte("[[staging]]\nmin_free = 12\nmax_used = 3\nverify = \"size\"\n[staging.x]\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		r, err := ParseRecipe("f.toml", doc)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) || !strings.HasPrefix(err.Error(), "recipe f.toml") {
				t.Fatalf("error %v is no recipe error", err)
			}
			return
		}
		for _, b := range r.Blocks {
			if !idRE.MatchString(b.ID) || !path.IsAbs(b.Src) || !path.IsAbs(b.Dst) || (b.Kind != KindHubMirror && b.Kind != KindSparseRows) {
				t.Fatalf("accepted block %+v", b)
			}
			if b.Kind == KindSparseRows && b.Partition == PartitionByRank && (*b.Rank < 0 || *b.Rank >= *b.Ranks) {
				t.Fatalf("accepted rank %d of %d", *b.Rank, *b.Ranks)
			}
		}
	})
}

// splitReader returns the bytes of b in pieces cut at the given points.
func splitReader(b []byte, cuts []byte) io.Reader {
	var rs []io.Reader
	last := 0
	for _, c := range cuts {
		at := last + int(c)
		if at > len(b) {
			break
		}
		rs = append(rs, bytes.NewReader(b[last:at]))
		last = at
	}
	rs = append(rs, bytes.NewReader(b[last:]))
	return iotest.HalfReader(io.MultiReader(rs...))
}

// FuzzLedger: a ledger snapshot and a journal decode the same whole and
// streamed in pieces, and what decodes passes the ledger's own checks.
func FuzzLedger(f *testing.F) {
	l := Ledger{Schema: LedgerSchema, ID: "lane", Node: "n", Kind: KindHubMirror, State: StateStaged, Entries: []Entry{
		{Path: "models--o--n/blobs/" + strings.Repeat("a", 64), Kind: EntryBlob, Size: 10, Sample: "00", Verify: VerifyFull},
		{Path: "x.safetensors", Kind: EntrySparse, Size: 100, Ranges: []RangeRecord{{Table: "t", Rows: [2]int64{0, 2}, Offset: 8, Length: 16}}},
	}}
	snap, _ := json.Marshal(l)
	line, _ := json.Marshal(Entry{Path: "models--o--n/snapshots/c/f", Kind: EntryLink, Target: "../../blobs/x"})
	f.Add(snap, append(append(line, '\n'), line[:10]...), []byte{3, 40})
	l.StagedAt, l.Entries[1].Ranges[0].Digest = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), "blake3:00"
	indented, _ := encodeLedger(&l)
	f.Add(indented, []byte{}, []byte{7})
	f.Add([]byte(`{"schema":1,"id":"a","state":"staged","entries":[{"path":"../x","kind":"blob"}]}`), []byte("{}\n{\"path\":\"a\"}\n"), []byte{1})
	f.Add([]byte(`{"schema":1}`), []byte(strings.Repeat("x", 70000)+"\n"), []byte{200, 200})
	f.Fuzz(func(t *testing.T, snapshot, journal, cuts []byte) {
		if fast, ok := fastLedger(snapshot); ok {
			var std Ledger
			if err := artifact.DecodeStrictJSON(bytes.NewReader(snapshot), &std); err != nil || !reflect.DeepEqual(fast, &std) {
				t.Fatalf("fastLedger took what encoding/json reads as %+v (%v): %+v", std, err, fast)
			}
		}
		whole, errWhole := decodeLedger("l", bytes.NewReader(snapshot))
		streamed, errStreamed := decodeLedger("l", splitReader(snapshot, cuts))
		if (errWhole == nil) != (errStreamed == nil) || !reflect.DeepEqual(whole, streamed) {
			t.Fatalf("whole %v %v, streamed %v %v", whole, errWhole, streamed, errStreamed)
		}
		if whole != nil {
			if err := whole.check(); err != nil {
				t.Fatalf("decoded ledger fails its check: %v", err)
			}
			want, _ := json.MarshalIndent(whole, "", " ")
			if got, err := encodeLedger(whole); err != nil || string(got) != string(want) {
				t.Fatalf("encodeLedger: %v\n%s\nwant\n%s", err, got, want)
			}
		}
		a := &Ledger{Schema: LedgerSchema, ID: "lane", State: StateStaging}
		b := &Ledger{Schema: LedgerSchema, ID: "lane", State: StateStaging}
		errA := replayJournal("j", a, bytes.NewReader(journal))
		errB := replayJournal("j", b, splitReader(journal, cuts))
		if (errA == nil) != (errB == nil) || !reflect.DeepEqual(a, b) {
			t.Fatalf("journal whole %v %v, streamed %v %v", a, errA, b, errB)
		}
		if err := a.check(); err != nil {
			t.Fatalf("replayed entries fail the check: %v", err)
		}
	})
}

// FuzzLinkBlob: a snapshot link resolves only to a file directly in its
// repository's blobs/.
func FuzzLinkBlob(f *testing.F) {
	f.Add("snapshots/c/a/b.json", "../../../blobs/"+strings.Repeat("f", 40))
	f.Add("snapshots/c/x", "../../blobs/../blobs/y")
	f.Add("snapshots/c/x", "/cache/models--o--n/blobs/z")
	f.Add("snapshots/c/x", "../../../models--p--q/blobs/z")
	f.Add("snapshots/c/x", "../../blobs/z.incomplete")
	f.Fuzz(func(t *testing.T, rel, target string) {
		name, ok := linkBlob(rel, target, "/cache/models--o--n")
		if !ok {
			return
		}
		if name == "" || strings.ContainsAny(name, "/") || name == ".." || name == "." || strings.HasSuffix(name, ".incomplete") {
			t.Fatalf("%q -> %q resolved to blob %q", rel, target, name)
		}
		if !path.IsAbs(target) && path.Join(path.Dir(rel), target) != "blobs/"+name {
			t.Fatalf("%q -> %q resolved to %q", rel, target, name)
		}
	})
}
