package artifact

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestReadFileAtMost(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		size int
		err  error
	}{{"empty", 0, nil}, {"at the bound", 8, nil}, {"one past", 9, ErrFileTooLarge}, {"far past", 4096, ErrFileTooLarge}} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, make([]byte, c.size), 0o644); err != nil {
			t.Fatal(err)
		}
		raw, err := ReadFileAtMost(p, 8)
		if !errors.Is(err, c.err) || (err == nil && len(raw) != c.size) {
			t.Errorf("%s: %d bytes, %v; want %d bytes, %v", c.name, len(raw), err, c.size, c.err)
		}
	}
	if _, err := ReadFileAtMost(filepath.Join(dir, "none"), 8); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
}
