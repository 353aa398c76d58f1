package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// heldCheckpoint imports a checkpoint of two shards beside its config and
// holds it again: the lease from Hold, with no payload file opened, its
// Linker (closed at the test's end), and the index of a safetensors shard
// and of another file.
func heldCheckpoint(t *testing.T) (d *store.Domain, h *store.Lease, k *store.Linker, shard, other int) {
	t.Helper()
	_, src := storetest.Checkpoint(t, 1<<20, 2)
	d = storetest.Open(t)
	l, _ := importDir(t, d, src)
	id := l.ID
	l.Close()
	h, err := d.Hold(context.Background(), id, store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if k, err = h.Linker(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	shard, other = -1, -1
	for i, f := range h.Index.Files {
		if artifact.IsSafetensors(f.Path) {
			shard = i
		} else {
			other = i
		}
	}
	if shard < 0 || other < 0 {
		t.Fatalf("the checkpoint %v has no safetensors file or no other file", h.Index.Files)
	}
	return d, h, k, shard, other
}

// openDir opens dir (made) as an O_PATH directory, closed at the test's end.
func openDir(t *testing.T, dir string) int {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestLinkerLink: Link puts the store's very inode at the name, whatever
// was there (nothing, that inode, another file), leaves nothing else in
// the folder and opens no payload file of the lease.
func TestLinkerLink(t *testing.T) {
	ctx := context.Background()
	_, h, k, shard, other := heldCheckpoint(t)
	for _, i := range []int{shard, other} {
		src := filepath.Join(h.Dir, h.Index.Files[i].Path)
		var want unix.Stat_t
		if err := unix.Lstat(src, &want); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name   string
			before func(t *testing.T, dst string)
		}{
			{"nothing there", func(*testing.T, string) {}},
			{"that inode already", func(t *testing.T, dst string) {
				if err := os.Link(src, dst); err != nil {
					t.Fatal(err)
				}
			}},
			{"another file", func(t *testing.T, dst string) {
				if err := os.WriteFile(dst, []byte("the pointer layer's placeholder"), 0o644); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			t.Run(h.Index.Files[i].Path+", "+tc.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "view")
				fd := openDir(t, dir)
				dst := filepath.Join(dir, "w")
				tc.before(t, dst)
				if err := k.Link(ctx, i, fd, "w"); err != nil {
					t.Fatal(err)
				}
				var have unix.Stat_t
				if err := unix.Lstat(dst, &have); err != nil {
					t.Fatal(err)
				}
				if have.Dev != want.Dev || have.Ino != want.Ino {
					t.Fatalf("%s is inode %d:%d, want the store's %d:%d", dst, have.Dev, have.Ino, want.Dev, want.Ino)
				}
				if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
					t.Fatalf("the view holds %v (%v), want the link alone", ents, err)
				}
			})
		}
	}
	if got := h.Files(); got != nil {
		t.Fatalf("Link opened the lease's files: %d of them", len(got))
	}
}

// TestLinkerFindsInvalid: a payload file changed since publication (cut
// short, its mode loosened, its tensor table rewritten, a symbolic link in
// its place) is found when it is linked: Link fails with the invalid
// finding, its link is gone, and the artifact is denied.
func TestLinkerFindsInvalid(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		shard  bool // the file changed is the safetensors shard, not the other file
		change func(t *testing.T, path string, size int64)
	}{
		{"shard cut short", true, func(t *testing.T, path string, size int64) { truncate(t, path, size/2) }},
		{"other file cut short", false, func(t *testing.T, path string, size int64) { truncate(t, path, size-1) }},
		{"mode loosened", false, func(t *testing.T, path string, _ int64) {
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"tensor table rewritten", true, func(t *testing.T, path string, _ int64) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			i := strings.Index(string(raw[:4096]), `"dtype":"BF16"`)
			if i < 0 {
				t.Fatalf("no BF16 tensor in the header of %s", path)
			}
			copy(raw[i:], `"dtype":"F16" `)
			rewrite(t, path, raw)
		}},
		{"a symbolic link in its place", false, func(t *testing.T, path string, _ int64) {
			tmp := path + ".link"
			if err := os.Symlink("/etc/hostname", tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, h, k, shard, other := heldCheckpoint(t)
			i := other
			if tc.shard {
				i = shard
			}
			e := h.Index.Files[i]
			tc.change(t, filepath.Join(h.Dir, e.Path), e.Size)
			dir := filepath.Join(t.TempDir(), "view")
			err := k.Link(ctx, i, openDir(t, dir), "w")
			if !store.IsInvalid(err) {
				t.Fatalf("Link of %s changed: %v, want an invalid finding", e.Path, err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "w")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the link of an invalid file stayed: %v", err)
			}
			h.Close()
			var denied *store.DeniedError
			if _, err := d.Lookup(ctx, h.ID, store.ManifestAndMetadata); !errors.As(err, &denied) {
				t.Fatalf("Lookup after the finding: %v, want the artifact denied", err)
			}
		})
	}
}

// TestLinkerDestinationFails: a link that fails for the view's sake (its
// folder gone) is an error that denies nothing.
func TestLinkerDestinationFails(t *testing.T) {
	ctx := context.Background()
	d, h, k, _, other := heldCheckpoint(t)
	dir := filepath.Join(t.TempDir(), "view")
	fd := openDir(t, dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := k.Link(ctx, other, fd, "w"); err == nil || store.IsInvalid(err) {
		t.Fatalf("Link into a removed folder: %v, want an error that is not an invalid finding", err)
	}
	h.Close()
	if l, err := d.Lookup(ctx, h.ID, store.ManifestAndMetadata); err != nil {
		t.Fatalf("Lookup after a failed link: %v, want the artifact", err)
	} else {
		l.Close()
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
}

// rewrite writes raw over path in place, keeping its inode and mode.
func rewrite(t *testing.T, path string, raw []byte) {
	t.Helper()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
}
