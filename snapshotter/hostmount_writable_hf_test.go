package snapshotter

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/layout/hfcache"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// TestWritableHostMountHF (weightsnap mount --writable --layout hf): the
// repository folder is an overlay whose lowerdir is the hub view. An
// engine's writes into it (through a snapshot link into its blob, a new
// file beside the snapshot's, refs/main rewritten, a new blob) land in the
// upper directory; the view keeps its links and bytes, its blobs stay the
// store's inodes, the store's files pass a full-checksum lookup, and the
// unmount drops the writes and the folder.
func TestWritableHostMountHF(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 256<<10, 33)
	aid := artifact.MustParseID(id)
	c := n.serveHostMounts(t)
	root := filepath.Join(t.TempDir(), "hub")
	folder := filepath.Join(root, hfcache.Folder("org/cache"))
	t.Cleanup(func() { unix.Unmount(folder, unix.MNT_DETACH) })
	mi, err := c.HostMount(ctx, control.HostMountRequest{ID: aid, Dir: root, Layout: pointer.LayoutHF, Repo: "org/cache", Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	if !mi.Writable || mi.Dir != folder || mi.Layout != pointer.LayoutHF {
		t.Fatalf("mount %+v, want writable at %s", mi, folder)
	}
	home := n.sn.mounts.home(folder)
	view := filepath.Join(home, "view")
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(folder))
	if err != nil || len(ms) == 0 {
		t.Fatalf("mountinfo of %s: %v %v", folder, ms, err)
	}
	if top := ms[len(ms)-1]; top.FSType != "overlay" || !strings.Contains(","+top.VFSOptions+",", ",lowerdir="+view+",") {
		t.Fatalf("%s is %s (%s), want an overlay over the hub view %s", folder, top.FSType, top.VFSOptions, view)
	}

	l, err := n.dom.Lookup(ctx, aid, store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	files := l.Files()
	if len(files) < 2 {
		t.Fatalf("want two files at least, the artifact has %d", len(files))
	}
	before := map[string][]byte{} // blob sha256 -> bytes
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(l.Dir, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		before[f.Entry.SHA256] = b
	}
	l.Close()

	// The engine's writes.
	snap := filepath.Join(folder, "snapshots", storetest.Revision)
	appended := filepath.Join(snap, files[0].Path) // a link into blobs/
	f, err := os.OpenFile(appended, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open a snapshot file for writing through the mount: %v", err)
	}
	if _, err := f.WriteString("appended"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, w := range []struct{ path, body string }{
		{filepath.Join(snap, "compiled", "kernel.bin"), "kernel"},
		{filepath.Join(folder, "refs", "main"), "0123456789abcdef0123456789abcdef01234567"},
		{filepath.Join(folder, "blobs", "new"), "new blob"},
	} {
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(w.path, []byte(w.body), 0o644); err != nil {
			t.Fatalf("write %s through the mount: %v", w.path, err)
		}
	}
	if got, _ := os.ReadFile(appended); !bytes.Equal(got, append(append([]byte(nil), before[files[0].Entry.SHA256]...), "appended"...)) {
		t.Fatalf("the mount shows %d bytes at %s after the append", len(got), appended)
	}

	// The view and the store are as they were.
	if ref, err := os.ReadFile(filepath.Join(view, "refs", "main")); err != nil || string(ref) != storetest.Revision {
		t.Fatalf("the view's refs/main is %q (%v) after the engine rewrote it", ref, err)
	}
	full, err := n.dom.Lookup(ctx, aid, store.FullChecksum)
	if err != nil {
		t.Fatalf("the store's artifact after writes through the mount: %v", err)
	}
	for _, f := range full.Files() {
		blob := filepath.Join(view, "blobs", f.Entry.SHA256)
		got, err := os.ReadFile(blob)
		if err != nil || !bytes.Equal(got, before[f.Entry.SHA256]) {
			t.Fatalf("%s changed under a writable mount (%v)", blob, err)
		}
		if !isStoreInode(t, blob, f.File) {
			t.Fatalf("the view's %s is no longer the store's inode", f.Path)
		}
		if target, err := os.Readlink(filepath.Join(view, "snapshots", storetest.Revision, f.Path)); err != nil || !strings.HasSuffix(target, "blobs/"+f.Entry.SHA256) {
			t.Fatalf("the view's snapshot of %s links to %q (%v)", f.Path, target, err)
		}
	}
	full.Close()
	for _, p := range []string{"blobs/new", "refs/main", filepath.Join("snapshots", storetest.Revision, "compiled", "kernel.bin"), filepath.Join("blobs", files[0].Entry.SHA256)} {
		if _, err := os.Stat(filepath.Join(home, "upper", p)); err != nil {
			t.Fatalf("the write to %s is not in the mount's upper directory: %v", p, err)
		}
	}

	if err := c.HostUnmount(ctx, folder); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the mount's home (its upper directory) is left: %v", err)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
		t.Fatalf("the cache root holds %v (%v) after the unmount, want nothing", ents, err)
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases after the unmount: %v", got)
	}
}
