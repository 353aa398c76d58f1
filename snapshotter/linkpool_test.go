package snapshotter

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLinkPool: views' symlinks of one target are one inode, the pool's;
// an entry with another target, which a view links, goes at the sweep
// before any link (as at start) and is made again; something at the
// destination is os.ErrExist; a sweep removes what no view links (and a
// crashed process's temporary links) and keeps what one does.
func TestLinkPool(t *testing.T) {
	const target = "../../blobs/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name  string
		stale bool // the pool's entry for target names something else
	}{
		{"fresh pool", false},
		{"stale entry", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p, err := newLinkPool(filepath.Join(root, "links"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.stale {
				if err := p.put(p.entry(target), "../../blobs/elsewhere"); err != nil {
					t.Fatal(err)
				}
				if err := os.Link(filepath.Join(p.dir, p.entry(target)), filepath.Join(root, "old-view")); err != nil {
					t.Fatal(err)
				}
				if err := p.sweep(); err != nil {
					t.Fatal(err)
				}
				os.Remove(filepath.Join(root, "old-view"))
			}
			crashed := filepath.Join(p.dir, linkPoolTemp+"1-1")
			if err := os.Symlink(target, crashed); err != nil {
				t.Fatal(err)
			}
			pool, err := p.open()
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(pool)
			dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dir)
			views := []string{filepath.Join(root, "a"), filepath.Join(root, "b")}
			for _, v := range views {
				if err := p.symlink(pool, target, dir, filepath.Base(v)); err != nil {
					t.Fatal(err)
				}
				if got, err := os.Readlink(v); err != nil || got != target {
					t.Fatalf("%s links to %q (%v)", v, got, err)
				}
			}
			var a, b, e unix.Stat_t
			if unix.Lstat(views[0], &a) != nil || unix.Lstat(views[1], &b) != nil || unix.Lstat(filepath.Join(p.dir, p.entry(target)), &e) != nil ||
				a.Ino != e.Ino || b.Ino != e.Ino || e.Nlink != 3 {
				t.Fatalf("views' inodes %d and %d, the pool's %d with %d links: want one inode, three links", a.Ino, b.Ino, e.Ino, e.Nlink)
			}
			if err := p.symlink(pool, target, dir, filepath.Base(views[0])); !errors.Is(err, os.ErrExist) {
				t.Fatalf("a symlink over an entry: %v, want os.ErrExist", err)
			}

			if err := p.sweep(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(crashed); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a crashed process's temporary link after a sweep: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(p.dir, p.entry(target))); err != nil {
				t.Fatalf("an entry views link, after a sweep: %v", err)
			}
			for _, v := range views {
				os.Remove(v)
			}
			if err := p.sweep(); err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(p.dir); len(ents) != 0 {
				t.Fatalf("the pool after its views went and a sweep: %v", ents)
			}
		})
	}
}
