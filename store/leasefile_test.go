package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestLeaseFileMapsOnFirstUse: a lease maps a file when its bytes are
// first asked for, the source's bytes, once (a second call gives the same
// mapping); a file whose size changed after the lookup checked it is not
// mapped at all (errdefs.ErrDataLoss).
func TestLeaseFileMapsOnFirstUse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		truncate bool
	}{
		{"as looked up", false},
		{"truncated since the lookup", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, src := storetest.Checkpoint(t, 1<<20, 2)
			d := storetest.Open(t)
			l, _ := importDir(t, d, src)
			defer l.Close()
			f := l.Files()[0]
			want, err := os.ReadFile(filepath.Join(dir, f.Path))
			if err != nil {
				t.Fatal(err)
			}
			if tc.truncate {
				if err := os.Chmod(f.Abs, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(f.Abs, f.Entry.Size/2); err != nil {
					t.Fatal(err)
				}
			}
			got, err := f.Data()
			if tc.truncate {
				if !errdefs.IsDataLoss(err) || got != nil {
					t.Fatalf("Data of a truncated file: %d bytes, %v; want nothing mapped and ErrDataLoss", len(got), err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Data: %d bytes, %v; want the source's %d", len(got), err, len(want))
			}
			again, err := f.Data()
			if err != nil || &again[0] != &got[0] {
				t.Fatalf("a second Data mapped again (%v)", err)
			}
		})
	}
}
