package snapshotter

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// TestWritableHostMount: a writable host mount is an overlay over the
// view. An engine's writes (a new file, a file rewritten, one appended
// to, one removed) land in the mount's upper directory: the store's files,
// which the view links, keep their bytes (a full-checksum lookup passes)
// and their inodes are never written. It survives a restart as a mount,
// and the unmount drops the writes with the mount's home.
func TestWritableHostMount(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 256<<10, 31)
	aid := artifact.MustParseID(id)
	sock := filepath.Join(t.TempDir(), "control.sock")
	serve := func() (*control.Client, *control.Server) {
		srv, err := control.Listen(ctx, sock, control.Services{Mounts: n.sn.HostMounts()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return control.NewClient(sock), srv
	}
	c, srv := serve()
	dir := filepath.Join(t.TempDir(), "cache")
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	mi, err := c.HostMount(ctx, control.HostMountRequest{ID: aid, Dir: dir, Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if !mi.Writable || !mi.Leased {
		t.Fatalf("mount %+v", mi)
	}

	l, err := n.dom.Lookup(ctx, aid, store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	files := l.Files()
	l.Close()
	if len(files) < 2 {
		t.Fatalf("want two files at least, the artifact has %d", len(files))
	}
	before := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(l.Dir, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		before[f.Path] = b
	}
	rewritten, appended := files[0].Path, files[1].Path
	if err := os.WriteFile(filepath.Join(dir, rewritten), []byte("rewritten"), 0o644); err != nil {
		t.Fatalf("rewrite a file through the writable mount: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, appended), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("appended"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "new", "kernel.bin"), []byte("new"), 0o644); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file in a directory not made: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new", "kernel.bin"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(files) > 2 {
		if err := os.Remove(filepath.Join(dir, files[2].Path)); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, rewritten)); string(got) != "rewritten" {
		t.Fatalf("the mount shows %q after the rewrite", got)
	}

	// The store's files, and the view that links them, are as they were.
	full, err := n.dom.Lookup(ctx, aid, store.FullChecksum)
	if err != nil {
		t.Fatalf("the store's artifact after writes through the mount: %v", err)
	}
	for _, f := range full.Files() {
		for _, p := range []string{filepath.Join(full.Dir, f.Path), filepath.Join(n.sn.mounts.home(dir), "view", f.Path)} {
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, before[f.Path]) {
				t.Fatalf("%s changed under a writable mount (%v)", p, err)
			}
		}
	}
	full.Close()
	if _, err := os.Stat(filepath.Join(n.sn.mounts.home(dir), "upper", "new", "kernel.bin")); err != nil {
		t.Fatalf("the write is not in the mount's upper directory: %v", err)
	}

	// A restart keeps it, as a writable mount.
	srv.Close()
	n.sn.Close()
	n.open(t)
	c, _ = serve()
	if ms, err := c.Mounts(ctx); err != nil || len(ms) != 1 || !ms[0].Writable || !ms[0].Leased {
		t.Fatalf("mounts after a restart %+v %v", ms, err)
	}
	if err := c.HostUnmount(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(raw), " "+dir+" ") {
		t.Fatal("still mounted")
	}
	if _, err := os.Stat(n.sn.mounts.home(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the mount's upper directory is left: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the mount point keeps %d entries after the unmount", len(ents))
	}
}
