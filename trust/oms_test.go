package trust

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

func readVector(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "oms", "v1.0", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestOMSVectors: the spec's valid vectors parse, with the root digest
// their subject names; the invalid ones are refused as invalid input.
func TestOMSVectors(t *testing.T) {
	for _, name := range []string{"valid/key.bundle.json", "valid/certificate.bundle.json", "valid/sigstore.bundle.json"} {
		o, err := ParseOMS(readVector(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := hex.EncodeToString(o.Root); got != o.Statement.Subject[0].Digest["sha256"] {
			t.Fatalf("%s: root digest %s, subject %s", name, got, o.Statement.Subject[0].Digest["sha256"])
		}
	}
	for _, name := range []string{"invalid/empty.bundle.json", "invalid/missing-envelope.bundle.json", "invalid/missing-tlog-entries.bundle.json",
		"invalid/missing-verification-material.bundle.json", "invalid-payload/wrong-predicate.bundle.json"} {
		if _, err := ParseOMS(readVector(t, name)); !errdefs.IsInvalidArgument(err) {
			t.Fatalf("%s: want invalid input, got %v", name, err)
		}
	}
}

// indexOf is an index holding the statement's files with their digests
// (what the store would have computed), plus extra files.
func indexOf(o *OMSBundle, extra ...artifact.FileEntry) *artifact.Index {
	idx := &artifact.Index{Schema: artifact.IndexSchema}
	for _, r := range o.Statement.Predicate.Resources {
		f := artifact.FileEntry{File: artifact.File{Path: r.Name, SHA256: r.Digest, BLAKE3: r.Digest}}
		idx.Files = append(idx.Files, f)
	}
	idx.Files = append(idx.Files, extra...)
	return idx
}

func fulcioMatch(t *testing.T, email string) Match {
	ca, err := os.ReadFile("testdata/oms/public-good-fulcio.pem")
	if err != nil {
		t.Fatal(err)
	}
	rekor, err := os.ReadFile("testdata/oms/public-good-rekor.pub")
	if err != nil {
		t.Fatal(err)
	}
	return Match{Scope: "hub/model", Requirements: []Requirement{{Type: TypeSigstoreSigned, RekorKeys: [][]byte{rekor},
		Fulcio: &Fulcio{CAPEM: ca, OIDCIssuer: "https://sigstore.verify.ibm.com/oauth2", SubjectEmail: email}, Identity: SignedIdentity{Type: "matchRepoDigestOrExact"}}}}
}

// TestOMSSigstoreVector: the spec's keyless vector verifies offline
// against the public-good Fulcio CA and Rekor key (its certificate
// expired minutes after signing; the log entry's time is what counts),
// and each changed premise is refused.
func TestOMSSigstoreVector(t *testing.T) {
	raw := readVector(t, "valid/sigstore.bundle.json")
	o, err := ParseOMS(raw)
	if err != nil {
		t.Fatal(err)
	}
	sig := Signature{Source: "model.sig", Raw: raw}
	now := time.Now()
	ignoredFile := artifact.FileEntry{File: artifact.File{Path: "ignore-me/a", SHA256: strings.Repeat("0", 64)}}
	got, err := VerifyOMS(fulcioMatch(t, "stefanb@us.ibm.com"), sig, indexOf(o, ignoredFile), now)
	if err != nil || len(got) != 1 || !strings.Contains(got[0].Identity, "stefanb@us.ibm.com") {
		t.Fatalf("%+v %v", got, err)
	}
	changed := indexOf(o)
	changed.Files[0].SHA256 = strings.Repeat("1", 64)
	missing := indexOf(o)
	missing.Files = missing.Files[1:]
	// Without a log entry the policy's Rekor key signed, nothing shows the
	// certificate (valid for ten minutes in 2025) was valid when it signed.
	_, _, otherRekor := newCosignKey(t, "")
	noLog := fulcioMatch(t, "stefanb@us.ibm.com")
	noLog.Requirements[0].RekorKeys = [][]byte{otherRekor}
	for _, tc := range []struct {
		name string
		m    Match
		idx  *artifact.Index
		want string
	}{
		{"expired certificate, no trusted log entry", noLog, indexOf(o), "transparency log"},
		{"other subject", fulcioMatch(t, "someone@example.com"), indexOf(o), "no signature by a key or identity"},
		{"unsigned extra file", fulcioMatch(t, "stefanb@us.ibm.com"), indexOf(o, artifact.FileEntry{File: artifact.File{Path: "extra.bin", SHA256: strings.Repeat("0", 64)}}), "unsigned files: extra.bin"},
		{"changed file", fulcioMatch(t, "stefanb@us.ibm.com"), changed, "the signature says"},
		{"missing file", fulcioMatch(t, "stefanb@us.ibm.com"), missing, "not in the artifact"},
	} {
		_, err := VerifyOMS(tc.m, sig, tc.idx, now)
		var r *Refusal
		if !errors.As(err, &r) || r.Scope != "hub/model" || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: want a refusal with %q, got %v", tc.name, tc.want, err)
		}
	}
}

// omsStatement is a statement over files, hashed with hashType.
func omsStatement(t *testing.T, hashType string, files map[string]string, method string) []byte {
	t.Helper()
	st := map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"predicateType": OMSPredicateType,
	}
	var res []map[string]string
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sortStrings(names)
	root := []byte{}
	for _, n := range names {
		res = append(res, map[string]string{"name": n, "digest": files[n], "algorithm": hashType})
		d, _ := hex.DecodeString(files[n])
		root = append(root, d...)
	}
	ser := map[string]any{"method": method, "hash_type": hashType, "allow_symlinks": false}
	if method == "shards" {
		ser["shard_size"] = 1000
	}
	st["predicate"] = map[string]any{"resources": res, "serialization": ser}
	st["subject"] = []map[string]any{{"name": "m", "digest": map[string]string{"sha256": sha256Hex(root)}}}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestOMSKey: OMS bundles signed with a key check against the store's
// digests: sha256, blake3 where the index holds the whole file's, and
// clear refusals where it would need a second pass.
func TestOMSKey(t *testing.T) {
	ctx := context.Background()
	key, _, pub := newCosignKey(t, "")
	_, _, otherPub := newCosignKey(t, "")
	h := func(c byte) string { return strings.Repeat(string(c), 64) }
	idx := &artifact.Index{Schema: artifact.IndexSchema, Files: []artifact.FileEntry{
		{File: artifact.File{Path: "config.json", SHA256: h('a'), BLAKE3: h('b')}},
		{File: artifact.File{Path: "model.safetensors", SHA256: h('c'), BLAKE3: h('d')}},
	}}
	sign := func(st []byte) Signature {
		raw, err := SignDSSE(ctx, key, InTotoPayloadType, st)
		if err != nil {
			t.Fatal(err)
		}
		return Signature{Source: "model.sig", Raw: raw}
	}
	now := time.Now()
	good := sign(omsStatement(t, "sha256", map[string]string{"config.json": h('a'), "model.safetensors": h('c')}, "files"))
	if _, err := VerifyOMS(keyMatch("s", pub), good, idx, now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    Match
		sig  Signature
		idx  *artifact.Index
		want string
	}{
		{"other key", keyMatch("s", otherPub), good, idx, "no signature by a key"},
		{"blake3 of a tensor tree", keyMatch("s", pub), sign(omsStatement(t, "blake3", map[string]string{"config.json": h('b'), "model.safetensors": h('d')}, "files")), idx, "tensor tree"},
		{"shards", keyMatch("s", pub), sign(omsStatement(t, "sha256", map[string]string{"config.json:0:10": h('a')}, "shards")), idx, "second pass"},
		{"unsigned", keyMatch("s", pub), sign(omsStatement(t, "sha256", map[string]string{"config.json": h('a')}, "files")), idx, "unsigned files: model.safetensors"},
	} {
		_, err := VerifyOMS(tc.m, tc.sig, tc.idx, now)
		var r *Refusal
		if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: want a refusal with %q, got %v", tc.name, tc.want, err)
		}
	}
	// blake3 compares where the index holds the whole file's BLAKE3.
	b3 := sign(omsStatement(t, "blake3", map[string]string{"config.json": h('b')}, "files"))
	one := &artifact.Index{Schema: artifact.IndexSchema, Files: idx.Files[:1]}
	if _, err := VerifyOMS(keyMatch("s", pub), b3, one, now); err != nil {
		t.Fatal(err)
	}
	// The spec's key vector is by a key this test does not hold.
	if _, err := VerifyOMS(keyMatch("s", pub), Signature{Source: "key.bundle.json", Raw: readVector(t, "valid/key.bundle.json")}, indexOf(mustOMS(t, readVector(t, "valid/key.bundle.json"))), now); err == nil {
		t.Fatal("the key vector verified with another key")
	}
}

func mustOMS(t *testing.T, raw []byte) *OMSBundle {
	o, err := ParseOMS(raw)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func sortStrings(s []string) { slices.Sort(s) }

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
