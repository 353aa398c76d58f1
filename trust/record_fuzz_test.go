package trust

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
)

// FuzzDecodeRecords: the signature records (of OCI manifests and of OMS
// bundles over the files) a store keeps and a peer sends
// (a weight manifest's "signatures", read whole, bounded) either decode
// or are refused as invalid input; what decodes encodes back to records
// equal to it, and each can be checked against a policy without panicking.
func FuzzDecodeRecords(f *testing.F) {
	manifest := []byte(`{"schemaVersion":2}`)
	bundle, err := os.ReadFile(filepath.Join("testdata", "oms", "v1.0", "valid", "key.bundle.json"))
	if err != nil {
		f.Fatal(err)
	}
	rec := NewRecord("reg.example/models/x@"+digest.FromBytes(manifest).String(), manifest,
		[]Signature{{Source: "referrer", Raw: bundle}}, []Verified{{Scope: "reg.example/models/x", Type: TypeSigstoreSigned, Signature: digest.FromBytes(bundle)}})
	good, err := EncodeRecords([]Record{rec})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	oms := NewOMSRecord("reg.example/models/x", "reg.example/models", Signature{Source: "model.sig", Raw: bundle},
		[]Verified{{Scope: "reg.example/models", Type: TypeSigstoreSigned, Signature: digest.FromBytes(bundle)}})
	both, err := EncodeRecords([]Record{rec, oms})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(both)
	f.Add([]byte(`{"schema":1,"records":[{"kind":"oms","ref":"","scope":"default","signatures":[{"source":"model.sig","bundle":"e30="}],"verified":[]}]}`))
	f.Add([]byte(`{"schema":1,"records":[]}`))
	f.Add([]byte(`{"schema":1,"records":[{"ref":"reg.example/x@sha256:00","manifest":"e30=","signatures":[],"verified":[]}]}`))
	f.Add([]byte(`{"schema":2,"records":[]}{}`))
	idx := &artifact.Index{Schema: artifact.IndexSchema, Files: []artifact.FileEntry{{File: artifact.File{Path: "model.safetensors", SHA256: strings.Repeat("a", 64)}}}}
	m := Match{Scope: "s", Requirements: []Requirement{{Type: TypeSigstoreSigned, Identity: SignedIdentity{Type: "matchRepoDigestOrExact"}}}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		rs, err := DecodeRecords(raw)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("not invalid input: %v", err)
			}
			return
		}
		again, err := EncodeRecords(rs)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeRecords(again)
		if err != nil || !reflect.DeepEqual(back, rs) && len(rs) > 0 {
			t.Fatalf("decoded records do not survive their encoding: %v", err)
		}
		for _, r := range rs {
			_, _ = r.Check(m, "", idx, time.Now())
		}
	})
}
