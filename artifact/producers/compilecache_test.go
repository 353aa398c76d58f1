package producers_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/pointer"
)

func writeCacheFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewCompileCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		link  bool
		want  []string // paths listed; nil: refused with class
		class error
	}{
		{name: "files, hidden ones and empty ones", files: map[string]string{"a/kernel.so": "elf", ".lock": "", "b/c/d.json": "{}"},
			want: []string{".lock", "a/kernel.so", "b/c/d.json"}},
		{name: "a view's pointer directory is left out", files: map[string]string{"k.bin": "x", pointer.Dir + "/ab.json": "{}"},
			want: []string{"k.bin"}},
		{name: "empty", files: map[string]string{}, class: errdefs.ErrInvalidArgument},
		{name: "only the pointer directory", files: map[string]string{pointer.Dir + "/ab.json": "{}"}, class: errdefs.ErrInvalidArgument},
		{name: "a symbolic link", files: map[string]string{"k.bin": "x"}, link: true, class: errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCacheFiles(t, dir, tc.files)
			if tc.link {
				if err := os.Symlink("k.bin", filepath.Join(dir, "alias")); err != nil {
					t.Fatal(err)
				}
			}
			p, err := producers.NewCompileCache(dir)
			if tc.class != nil {
				if !errors.Is(err, tc.class) {
					t.Fatalf("NewCompileCache = %v, want %v", err, tc.class)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range p.Files() {
				got = append(got, f.Path)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("files %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("files %v, want %v", got, tc.want)
				}
			}
			if p.Phase() != producers.PostLoadOnly {
				t.Fatalf("phase %s", p.Phase())
			}
		})
	}
	if _, err := producers.NewCompileCache(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a missing directory: %v, want not found", err)
	}
}
