package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadSmall: a metadata file is read whole up to its limit, an empty
// one too; one past the limit, and a symbolic link, are refused.
func TestReadSmall(t *testing.T) {
	const limit = 8192
	for _, tc := range []struct {
		name string
		body []byte // nil: a symbolic link to a file of limit bytes
		ok   bool
	}{
		{"empty", []byte{}, true},
		{"small", []byte(`{"id":"x"}`), true},
		{"at the limit", bytes.Repeat([]byte("a"), limit), true},
		{"past the limit", bytes.Repeat([]byte("a"), limit+1), false},
		{"a symbolic link", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.body == nil {
				if err := os.WriteFile(filepath.Join(dir, "target"), bytes.Repeat([]byte("a"), limit), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("target", filepath.Join(dir, "meta")); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(filepath.Join(dir, "meta"), tc.body, 0o644); err != nil {
				t.Fatal(err)
			}
			dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dfd)
			got, err := readSmall(dfd, "meta", limit)
			if (err == nil) != tc.ok {
				t.Fatalf("readSmall: %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !bytes.Equal(got, tc.body) {
				t.Fatalf("readSmall read %d bytes, want the file's %d", len(got), len(tc.body))
			}
		})
	}
}
