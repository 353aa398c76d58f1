package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/fanout"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// TestViewLinks: a view's file becomes the lease's very inode whatever was
// at its path (nothing, that inode already, another file), by the
// descriptor or through /proc, with its folder made as needed, and nothing
// else is left beside it.
func TestViewLinks(t *testing.T) {
	d := storetest.Open(t)
	id := importInto(t, d, storetest.Synth(t, synth.Options{Size: 64 << 10, Shards: 1, DType: "BF16", Seed: 3}))
	l, err := d.Lookup(context.Background(), artifact.MustParseID(id), store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := l.Files()[0]
	var want unix.Stat_t
	if err := unix.Fstat(int(f.File.Fd()), &want); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, dst string) // what is at dst first
		byProc bool
	}{
		{"nothing there", func(*testing.T, string) {}, false},
		{"nothing there, through /proc", func(*testing.T, string) {}, true},
		{"that inode already", func(t *testing.T, dst string) {
			mkdir(t, filepath.Dir(dst))
			if err := os.Link(f.Abs, dst); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"another file", func(t *testing.T, dst string) {
			mkdir(t, filepath.Dir(dst))
			if err := os.WriteFile(dst, []byte("the pointer layer's placeholder"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"another file, through /proc", func(t *testing.T, dst string) {
			mkdir(t, filepath.Dir(dst))
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "models", "m", "sub", f.Path)
			tc.before(t, dst)
			links := newViewLinks()
			defer links.dirs.Close()
			links.byProc.Store(tc.byProc)
			dir, err := links.dirs.Open(filepath.Dir(dst))
			if err != nil {
				t.Fatal(err)
			}
			if err := links.link(dir, filepath.Base(dst), f); err != nil {
				t.Fatal(err)
			}
			var have unix.Stat_t
			if err := unix.Lstat(dst, &have); err != nil {
				t.Fatal(err)
			}
			if have.Dev != want.Dev || have.Ino != want.Ino {
				t.Fatalf("%s is inode %d:%d, want the store's %d:%d", dst, have.Dev, have.Ino, want.Dev, want.Ino)
			}
			ents, err := os.ReadDir(filepath.Dir(dst))
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 1 {
				t.Fatalf("%d entries beside the link: %v", len(ents), ents)
			}
		})
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestViewLinkAll: a view of a model of hundreds of files in many folders,
// linked by several goroutines, has every file at its path as the store's
// very inode, the second time too (over the first), by the descriptor and
// through /proc.
func TestViewLinkAll(t *testing.T) {
	n := newNode(t, t.TempDir())
	id := importInto(t, n.dom, manyFilesModel(t, 400))
	l, err := n.dom.Lookup(context.Background(), artifact.MustParseID(id), store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Files()) < 2*fanout.MinRun {
		t.Fatalf("%d files: too few for more than one linker", len(l.Files()))
	}
	for _, byProc := range []bool{false, true} {
		root := filepath.Join(t.TempDir(), "view")
		for range 2 {
			links := newViewLinks()
			links.byProc.Store(byProc)
			err := links.linkAll(root, l.Files())
			links.dirs.Close()
			if err != nil {
				t.Fatal(err)
			}
			n.viewLinksStore(t, id, root)
		}
	}
}
