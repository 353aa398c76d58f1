package trust

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// omsRecord is the record of a key-signed OMS bundle over idx's files
// (sha256), verified under scope for ref, and the match it met.
func omsRecord(t *testing.T, ref, scope string, idx *artifact.Index) (Record, Match) {
	t.Helper()
	key, _, pub := newCosignKey(t, "")
	files := map[string]string{}
	for _, f := range idx.Files {
		files[f.Path] = f.SHA256
	}
	raw, err := SignDSSE(context.Background(), key, InTotoPayloadType, omsStatement(t, "sha256", files, "files"))
	if err != nil {
		t.Fatal(err)
	}
	m := keyMatch(scope, pub)
	sig := Signature{Source: "/models/m/model.sig", Raw: raw}
	v, err := VerifyOMS(m, sig, idx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return NewOMSRecord(ref, scope, sig, v), m
}

// TestOMSRecord: an OMS record survives its encoding beside manifest
// records, checks again against the index it was verified over under its
// own scope, and is refused under another scope, another key, without an
// index, or over other files; its decoding is strict per kind.
func TestOMSRecord(t *testing.T) {
	h := func(c byte) string { return strings.Repeat(string(c), 64) }
	idx := &artifact.Index{Schema: artifact.IndexSchema, Files: []artifact.FileEntry{
		{File: artifact.File{Path: "config.json", SHA256: h('a')}},
		{File: artifact.File{Path: "model.safetensors", SHA256: h('c')}},
	}}
	rec, m := omsRecord(t, "reg.example/models/x", "reg.example/models", idx)
	if rec.Kind != KindOMS || !rec.Signed() || rec.Digest() != rec.Verified[0].Signature {
		t.Fatalf("record %+v", rec)
	}
	man, _ := signedRecord(t, "reg.example/models/x")
	raw, err := EncodeRecords(MergeRecord(MergeRecord(MergeRecord(nil, man), rec), rec))
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRecords(raw)
	if err != nil || len(back) != 2 || back[1].Kind != KindOMS || back[1].Scope != rec.Scope {
		t.Fatalf("decoded %+v %v", back, err)
	}
	if _, err := back[1].Check(m, "reg.example/models/y", idx, time.Now()); err != nil {
		t.Fatalf("check under its scope: %v", err)
	}
	_, _, otherPub := newCosignKey(t, "")
	changed := &artifact.Index{Schema: artifact.IndexSchema, Files: append([]artifact.FileEntry{{File: artifact.File{Path: "added.txt", SHA256: h('e')}}}, idx.Files...)}
	for _, tc := range []struct {
		name string
		m    Match
		idx  *artifact.Index
		want string
	}{
		{"another scope", keyMatch("reg.example/other", m.Requirements[0].Keys[0].PEM), idx, `verified under scope "reg.example/models"`},
		{"another key", keyMatch("reg.example/models", otherPub), idx, "no signature by a key"},
		{"no index", m, nil, "none were given"},
		{"other files", m, changed, "unsigned files: added.txt"},
	} {
		_, err := back[1].Check(tc.m, "", tc.idx, time.Now())
		var rf *Refusal
		if !errors.As(err, &rf) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want a refusal with %q, got %v", tc.name, tc.want, err)
		}
	}
	mutate := func(f func(*Record)) []byte {
		r := rec
		r.Signatures = append([]Signature(nil), rec.Signatures...)
		f(&r)
		raw, _ := EncodeRecords([]Record{r})
		return raw
	}
	for _, tc := range []struct {
		name string
		raw  []byte
	}{
		{"unknown kind", mutate(func(r *Record) { r.Kind = "gpg" })},
		{"no scope", mutate(func(r *Record) { r.Scope = "" })},
		{"a manifest", mutate(func(r *Record) { r.Manifest = []byte("{}") })},
		{"a pinned reference", mutate(func(r *Record) { r.Ref = man.Ref })},
		{"two bundles", mutate(func(r *Record) { r.Signatures = append(r.Signatures, r.Signatures[0]) })},
		{"not an OMS bundle", mutate(func(r *Record) { r.Signatures[0].Raw = man.Signatures[0].Raw })},
		{"a cosign v2 payload", mutate(func(r *Record) { r.Signatures[0] = Signature{Source: "tag", Payload: []byte("{}")} })},
		{"a manifest record with a scope", func() []byte { r := man; r.Scope = "s"; raw, _ := EncodeRecords([]Record{r}); return raw }()},
	} {
		if _, err := DecodeRecords(tc.raw); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: %v, want invalid input", tc.name, err)
		}
	}
}

// TestMatchOMS: a model.sig's scope is its repository's where that is a
// registry repository, else the default; its record keeps the name.
func TestMatchOMS(t *testing.T) {
	p, err := ParsePolicy("policy.json", []byte(`{"default":[{"type":"reject"}],"transports":{"docker":{"reg.example/models":[{"type":"insecureAcceptAnything"}]}}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ repo, scope, ref string }{
		{"reg.example/models/x", "reg.example/models", "reg.example/models/x"},
		{"org/name", "default", ""},
		{"", "default", ""},
		{"reg.example/models/x:tag", "reg.example/models", "reg.example/models/x:tag"},
		{"reg.example/models/x@sha256:" + strings.Repeat("a", 64), "default", ""},
	} {
		m, ref := p.MatchOMS(tc.repo)
		if m.Scope != tc.scope || ref != tc.ref {
			t.Errorf("%q: scope %q ref %q, want %q %q", tc.repo, m.Scope, ref, tc.scope, tc.ref)
		}
	}
}
