package trust

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// FuzzParseOMS: any bytes read as a model.sig or a cosign bundle either
// parse or are refused as invalid input; a parsed OMS bundle's files
// check against an index without panicking.
func FuzzParseOMS(f *testing.F) {
	for _, name := range []string{"valid/key.bundle.json", "valid/sigstore.bundle.json", "valid/certificate.bundle.json", "invalid/missing-envelope.bundle.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", "oms", "v1.0", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	idx := &artifact.Index{Schema: artifact.IndexSchema, Files: []artifact.FileEntry{{File: artifact.File{Path: "signme-1"}}}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		o, err := ParseOMS(raw)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("not invalid input: %v", err)
			}
			return
		}
		_ = o.CheckFiles(idx)
	})
}
