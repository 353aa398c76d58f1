package trust

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// signedRecord is a record of manifest under ref's repository, signed by
// a new key, and the match its key meets.
func signedRecord(tb testing.TB, repo string) (Record, Match) {
	tb.Helper()
	key, _, pub := newCosignKey(tb, "")
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`)
	md := digest.FromBytes(manifest)
	b, err := SignManifest(context.Background(), key, md)
	if err != nil {
		tb.Fatal(err)
	}
	m := keyMatch(repo, pub)
	sigs := []Signature{{Source: "referrer", Raw: b}, {Source: "unused", Raw: []byte(`{}`)}}
	v, err := VerifyManifest(m, md, repo, sigs, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return NewRecord(repo+"@"+md.String(), manifest, sigs, v), m
}

// TestRecord: a record keeps only the signatures a requirement was met
// with, checks again offline under the same key and refuses another
// repository's use; its encoding is strict: a reference that does not
// name its manifest, or a trailing value, is invalid input.
func TestRecord(t *testing.T) {
	rec, m := signedRecord(t, "reg.example/models/x")
	if len(rec.Signatures) != 1 || rec.Signatures[0].Source != "referrer" || !rec.Signed() {
		t.Fatalf("kept signatures %+v", rec.Signatures)
	}
	if _, err := rec.Check(m, "reg.example/models/x", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	var rf *Refusal
	if _, err := rec.Check(m, "reg.example/models/y", nil, time.Now()); !errors.As(err, &rf) || !strings.Contains(err.Error(), "not reg.example/models/y") {
		t.Fatalf("another repository: %v", err)
	}
	other, _ := signedRecord(t, "reg.example/models/x")
	if _, err := other.Check(m, "", nil, time.Now()); !errors.As(err, &rf) {
		t.Fatalf("a record by another key: %v", err)
	}
	raw, err := EncodeRecords(MergeRecord(MergeRecord(nil, rec), rec))
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRecords(raw)
	if err != nil || len(back) != 1 || back[0].Ref != rec.Ref {
		t.Fatalf("decoded %+v %v", back, err)
	}
	moved := rec
	moved.Ref = "reg.example/models/x@" + digest.FromString("another").String()
	bad, _ := EncodeRecords([]Record{moved})
	for name, raw := range map[string][]byte{"reference of another manifest": bad, "trailing value": append(raw, []byte(" {}")...)} {
		if _, err := DecodeRecords(raw); !errdefs.IsInvalidArgument(err) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// BenchmarkRecordCheck is what a store hit of a reference whose scope
// requires a signature costs beyond the lookup: one recorded cosign
// bundle decoded and verified again.
func BenchmarkRecordCheck(b *testing.B) {
	rec, m := signedRecord(b, "reg.example/models/x")
	raw, err := EncodeRecords([]Record{rec})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		rs, err := DecodeRecords(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rs[0].Check(m, "reg.example/models/x", nil, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}
