package store_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestHoldOpensFilesOnFirstUse: a lease from Hold opens no payload file at
// the lookup (Files is nil); File opens each, with the lookup's checks, so a file changed since publication is found there:
// the artifact is denied, as a lookup that found it would have denied it.
func TestHoldOpensFilesOnFirstUse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		truncate int // the file truncated before the Hold, or -1
	}{
		{"intact", -1},
		{"first file truncated", 0},
		{"second file truncated", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			_, src := storetest.Checkpoint(t, 1<<20, 2)
			d := storetest.Open(t)
			l, _ := importDir(t, d, src)
			files := l.Files()
			id, n := l.ID, len(files)
			if tc.truncate >= 0 {
				f := files[tc.truncate]
				if err := os.Chmod(f.Abs, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(f.Abs, f.Entry.Size/2); err != nil {
					t.Fatal(err)
				}
			}
			l.Close()

			h, err := d.Hold(ctx, id, store.ManifestAndMetadata)
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			defer h.Close()
			if got := h.Files(); got != nil {
				t.Fatalf("Files of a lease from Hold before File: %d files, want none", len(got))
			}
			first, ferr := h.File(ctx, 0)
			var aerr error
			for i := range n {
				if _, err := h.File(ctx, i); err != nil {
					aerr = err
					break
				}
			}
			if tc.truncate < 0 {
				if ferr != nil || first.Path != h.Index.Files[0].Path {
					t.Fatalf("File 0: %v, %v; want %s", first, ferr, h.Index.Files[0].Path)
				}
				if all := h.Files(); aerr != nil || len(all) != n || all[0] != first {
					t.Fatalf("File of each: %d files, %v; want %d, the first as File opened it", len(all), aerr, n)
				}
				return
			}
			if tc.truncate == 0 && !store.IsInvalid(ferr) {
				t.Fatalf("File 0 truncated: %v; want an invalid finding", ferr)
			}
			if !store.IsInvalid(aerr) || h.Files() != nil {
				t.Fatalf("File of each with file %d truncated: %v, %d files; want an invalid finding and no files", tc.truncate, aerr, len(h.Files()))
			}
			h.Close()
			var denied *store.DeniedError
			if _, err := d.Lookup(ctx, id, store.ManifestAndMetadata); !errors.As(err, &denied) {
				t.Fatalf("Lookup after the Hold's finding: %v; want the artifact denied", err)
			}
		})
	}
}
