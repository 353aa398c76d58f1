package dirfd

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpen: a directory is made with its parents, or taken as it is, opened
// once, and entries made by name in it land at its path.
func TestOpen(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "there"), 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dir  string
	}{
		{"new, its parents missing", filepath.Join(root, "a", "b", "c")},
		{"new, its parent there", filepath.Join(root, "a", "d")},
		{"there already", filepath.Join(root, "there")},
	}
	s := New()
	defer s.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := s.Open(tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			if again, err := s.Open(tt.dir); err != nil || again != fd {
				t.Fatalf("second open: %d %v, want the same descriptor %d", again, err, fd)
			}
			if err := unix.Symlinkat("target", fd, "entry"); err != nil {
				t.Fatal(err)
			}
			if got, err := os.Readlink(filepath.Join(tt.dir, "entry")); err != nil || got != "target" {
				t.Fatalf("entry made by name: %q %v", got, err)
			}
		})
	}
	if _, err := s.Open(filepath.Join(root, "there", "entry", "x")); err == nil {
		t.Fatal("a directory under a symlink to nowhere opened")
	}
}
