package trust

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// TestDirSignature: a directory's model.sig, checked against the digests
// the store computed: under a scope that requires the key, a bundle by it
// over exactly the files is verified and its record kept, and a missing
// model.sig is refused before any file is read; under a scope that wants
// none, a directory without one is unchecked, a bundle over the files is
// accepted and recorded as nothing, and one that leaves a file unsigned
// is refused; a path that is not a directory is left to the import.
func TestDirSignature(t *testing.T) {
	key, _, pub := newCosignKey(t, "")
	h := func(c byte) string { return strings.Repeat(string(c), 64) }
	files := []artifact.FileEntry{
		{File: artifact.File{Path: "config.json", SHA256: h('a')}},
		{File: artifact.File{Path: "model.safetensors", SHA256: h('c')}},
	}
	raw, err := SignDSSE(context.Background(), key, InTotoPayloadType, omsStatement(t, "sha256", map[string]string{"config.json": h('a'), "model.safetensors": h('c')}, "files"))
	if err != nil {
		t.Fatal(err)
	}
	required, free := keyMatch("reg.example/models", pub), Match{Scope: "default", Requirements: []Requirement{{Type: TypeAcceptAnything}}}
	signed := t.TempDir()
	os.WriteFile(filepath.Join(signed, OMSBundleFile), raw, 0o644)
	bare := t.TempDir()
	notDir := filepath.Join(bare, "file")
	os.WriteFile(notDir, nil, 0o644)
	extra := append([]artifact.FileEntry{{File: artifact.File{Path: "notes.txt", SHA256: h('e')}}}, files...)
	for _, tc := range []struct {
		name    string
		m       Match
		dir     string
		files   []artifact.FileEntry
		present bool
		kept    bool   // a signed record to keep
		want    string // "" accepted
		refusal bool
	}{
		{"required, signed", required, signed, files, true, true, "", false},
		{"required, an unsigned file", required, signed, extra, true, false, "unsigned files: notes.txt", true},
		{"required, no model.sig", required, bare, nil, false, false, "no model.sig beside the files", true},
		{"free, no model.sig", free, bare, files, false, false, "", false},
		{"free, signed", free, signed, files, true, false, "", false},
		{"free, an unsigned file", free, signed, extra, true, false, "unsigned files: notes.txt", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig, err := ReadDirSignature(tc.m, "reg.example/models/x", tc.dir)
			if err == nil {
				var v []Verified
				var rec Record
				if sig.Present() != tc.present {
					t.Fatalf("present %v, want %v", sig.Present(), tc.present)
				}
				v, rec, err = sig.Check(tc.files)
				if err == nil && (rec.Signed() != tc.kept || tc.present && (len(v) != 1 || v[0].Scope != tc.m.Scope)) {
					t.Fatalf("verified %+v, record %+v", v, rec)
				}
				if err == nil && tc.kept && (rec.Kind != KindOMS || rec.Scope != "reg.example/models" || rec.Ref != "reg.example/models/x") {
					t.Fatalf("record %+v", rec)
				}
			}
			var rf *Refusal
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &rf) != tc.refusal):
				t.Fatalf("got %v, want %q (a refusal: %v)", err, tc.want, tc.refusal)
			case tc.want != "" && !tc.refusal && !errdefs.IsFailedPrecondition(err):
				t.Fatalf("not a failed precondition: %v", err)
			}
		})
	}
	if sig, err := ReadDirSignature(required, "", notDir); sig != nil || err != nil {
		t.Fatalf("not a directory: %+v %v", sig, err)
	}
}
