package powercut

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// The store fixes the power-cut harness led to, each with a test that
// fails without it.

// afterReturn runs the scenario's operation to its end, cuts the power
// right after it returned, and materialises the durable image.
func (h *harness) afterReturn(sc *scenario) string {
	h.t.Helper()
	dir := h.t.TempDir()
	r, img, err := h.operate(sc, sc.prepare(h.t, h.src), Options{}, filepath.Join(dir, "run"))
	if err != nil {
		h.t.Fatal(err)
	}
	if !r.returned {
		h.t.Fatalf("%s did not return: %s", sc.name, r.out)
	}
	image := filepath.Join(dir, "image")
	if err := img.Materialise(image); err != nil {
		h.t.Fatal(err)
	}
	return image
}

// TestPublishedModesAreDurable: a publication hardens its files and
// directories after the rename, with chmod. The files' read-only mode now
// reaches the disk with their own fsync (before, nothing synced it, and a
// power cut left a READY artifact that fails validation), and every
// directory of the artifact is synced after its chmod, not only the top one.
func TestPublishedModesAreDurable(t *testing.T) {
	h := newHarness(t)
	h.src = sourceWithSubdirectory(t)
	root := h.afterReturn(scenarioNamed(t, "publication"))
	dirs := 0
	err := filepath.WalkDir(filepath.Join(root, "artifacts", h.src.ID.Hex()), func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o444)
		if e.IsDir() {
			want = 0o555
			dirs++
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %o after the power cut, want %o", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if dirs != 2 {
		t.Fatalf("%d directories in the artifact, want it and its subdirectory", dirs)
	}
}

// sourceWithSubdirectory is a small checkpoint with a file in a subdirectory.
func sourceWithSubdirectory(t *testing.T) *storetest.Source {
	s := storetest.NewSource(t, 32<<10, 1, 9)
	must(t, os.Mkdir(filepath.Join(s.Dir, "tokenizer"), 0o755))
	must(t, os.WriteFile(filepath.Join(s.Dir, "tokenizer", "vocab.json"), []byte(`{"a":0}`), 0o644))
	src, _, err := artifact.ScanSource(context.Background(), s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Src, s.Identity = src, storetest.Identity(src)
	s.ID, _ = s.Identity.ID()
	return s
}

// TestDenyMarkerRemovalsAreDurable: every path that removes a deny marker
// syncs deny/ after it. Before, the removal was left to chance, and a power
// cut after a rebuild brought the old marker back over the new artifact.
func TestDenyMarkerRemovalsAreDurable(t *testing.T) {
	h := newHarness(t)
	gcMarker := filepath.Join("deny", "0000000000000000000000000000000000000000000000000000000000000002")
	staleMarker := &scenario{name: "a build over a stale deny marker", op: "build", wantOut: "ok",
		prepare: prepared(func(t *testing.T, root string, s *storetest.Source) {
			if _, err := store.Open(context.Background(), root, nil); err != nil {
				t.Fatal(err)
			}
			must(t, os.WriteFile(filepath.Join(root, "deny", s.ID.Hex()), []byte(`{"reason":"test"}`), 0o644))
		})}
	cases := []struct {
		sc     *scenario
		marker string
	}{
		{scenarioNamed(t, "quarantine"), filepath.Join("deny", h.src.ID.Hex())},
		{staleMarker, filepath.Join("deny", h.src.ID.Hex())},
		{scenarioNamed(t, "gc"), gcMarker},
	}
	for _, c := range cases {
		t.Run(c.sc.name, func(t *testing.T) {
			h.t = t
			root := h.afterReturn(c.sc)
			if _, err := os.Lstat(filepath.Join(root, c.marker)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s came back after the power cut (%v)", c.marker, err)
			}
		})
	}
}
