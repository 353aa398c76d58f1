package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/layout/hfcache"
	"github.com/weightsnap/weightsnap/pointer"
	"golang.org/x/sys/unix"
)

// TestWeightLayerHF: two weight layers with the hf layout at one target
// (one image, two repos in one cache) commit snapshots whose directories
// hold each its repository folder, pointer file inside; a container over
// both sees one cache root of the two folders and nothing else, every
// snapshot entry a relative link resolving to the store's inode.
func TestWeightLayerHF(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	ids := []string{n.importModel(t, 256<<10, 41), n.importModel(t, 128<<10, 42)}
	repos := []string{"org/alpha", "org/beta"}
	parent := ""
	var dirs []string
	for i, id := range ids {
		labels := weightLabels(id, "/hub", chainID(i+1))
		labels[pointer.LabelLayout], labels[pointer.LabelRepo] = pointer.LayoutHF, repos[i]
		n.prepareWeights(t, "extract "+chainID(i+1), parent, labels)
		parent = chainID(i + 1)
		dir, err := committedDir(ctx, n.sn.overlay, chainID(i+1))
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
		folder := filepath.Join(dir, "hub", hfcache.Folder(repos[i]))
		if _, err := os.Stat(filepath.Join(folder, pointer.Dir, artifact.MustParseID(id).Hex()+".json")); err != nil {
			t.Fatalf("pointer file: %v", err)
		}
		if ents, _ := os.ReadDir(filepath.Join(dir, "hub")); len(ents) != 1 {
			t.Fatalf("snapshot %d's cache root holds %v, want its repository folder only", i, ents)
		}
	}

	mounts, err := n.sn.Prepare(ctx, "container", parent)
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	if err := mount.All(mounts, rootfs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mount.UnmountAll(rootfs, 0) })
	ents, err := os.ReadDir(filepath.Join(rootfs, "hub"))
	if err != nil || len(ents) != 2 || ents[0].Name() != hfcache.Folder(repos[0]) || ents[1].Name() != hfcache.Folder(repos[1]) {
		t.Fatalf("the container's cache root holds %v (%v)", ents, err)
	}
	for i, id := range ids {
		l, err := n.dom.Lookup(ctx, artifact.MustParseID(id), "")
		if err != nil {
			t.Fatal(err)
		}
		folder := filepath.Join(rootfs, "hub", hfcache.Folder(repos[i]))
		if ref, err := os.ReadFile(filepath.Join(folder, "refs", "main")); err != nil || string(ref) != storetest.Revision {
			t.Fatalf("refs/main %q %v", ref, err)
		}
		for _, f := range l.Files() {
			snap := filepath.Join(folder, "snapshots", storetest.Revision, f.Path)
			if target, err := os.Readlink(snap); err != nil || target != strings.Repeat("../", 2+strings.Count(f.Path, "/"))+"blobs/"+f.Entry.SHA256 {
				t.Fatalf("%s links to %q (%v)", snap, target, err)
			}
			if got, err := os.Stat(snap); err != nil || got.Size() != f.Entry.Size {
				t.Fatalf("%s: %v, want %d bytes", snap, err, f.Entry.Size)
			}
			// Below the overlay, in the weight snapshot: the blob is the store's inode.
			var a, b unix.Stat_t
			if err := unix.Stat(filepath.Join(dirs[i], "hub", hfcache.Folder(repos[i]), "blobs", f.Entry.SHA256), &a); err != nil {
				t.Fatal(err)
			}
			unix.Fstat(int(f.File.Fd()), &b)
			if a.Dev != b.Dev || a.Ino != b.Ino {
				t.Fatalf("blob of %s is not the store's inode", f.Path)
			}
		}
		l.Close()
	}
	if err := mount.UnmountAll(rootfs, 0); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Remove(ctx, "container"); err != nil {
		t.Fatal(err)
	}
}

// TestPointerFoundAtCommitHF: an hf pointer layer unpacked without its
// labels (its pointer file and notice in the repository folder) is found
// at Commit and becomes a weight snapshot laid out as a hub cache, its
// notice gone.
func TestPointerFoundAtCommitHF(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 128<<10, 63)
	mounts, err := n.sn.Prepare(ctx, "extract", "")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := snapshotDir(mounts)
	ptr := pointer.Pointer{Schema: pointer.Schema, Artifact: "reg.example/m@sha256:" + strings.Repeat("2", 64), ID: artifact.MustParseID(id),
		Target: "/hub", Layout: pointer.LayoutHF, Repo: "org/m"}
	writePointerLayer(t, dir, ptr)
	if err := n.sn.Commit(ctx, chainID(70), "extract", snapshots.WithLabels(map[string]string{snapshots.LabelSnapshotRef: chainID(70)})); err != nil {
		t.Fatal(err)
	}
	info, err := n.sn.Stat(ctx, chainID(70))
	if err != nil || info.Labels[pointer.LabelIdentity] != id || info.Labels[pointer.LabelLayout] != pointer.LayoutHF || info.Labels[pointer.LabelRepo] != "org/m" {
		t.Fatalf("committed %+v %v, want a weight snapshot with the hf layout", info.Labels, err)
	}
	cdir, _ := committedDir(ctx, n.sn.overlay, chainID(70))
	folder := filepath.Join(cdir, "hub", hfcache.Folder("org/m"))
	if ref, err := os.ReadFile(filepath.Join(folder, "refs", "main")); err != nil || string(ref) != storetest.Revision {
		t.Fatalf("refs/main %q %v", ref, err)
	}
	if _, err := os.Stat(filepath.Join(cdir, pointer.NoticePath(ptr))); !os.IsNotExist(err) {
		t.Fatalf("notice left in the weight snapshot: %v", err)
	}
}

// TestRefillHF: an hf weight snapshot emptied by the store's eviction is
// filled in again as a hub cache folder, its blobs the store's inodes.
func TestRefillHF(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	ev, err := evict.New(n.dom)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetReleaser(n.sn)
	src := storetest.Synth(t, synth.Options{Size: 128 << 10, Shards: 2, DType: "BF16", Seed: 64})
	id := importInto(t, n.dom, src)
	labels := weightLabels(id, "/hub", chainID(80))
	labels[pointer.LabelLayout], labels[pointer.LabelRepo] = pointer.LayoutHF, "org/m"
	n.prepareWeights(t, "extract", "", labels)
	if rep, err := ev.To(ctx, 0, false); err != nil || len(rep.Evicted) != 1 {
		t.Fatalf("eviction of the unused artifact: %+v %v", rep, err)
	}
	importInto(t, n.dom, src)
	if _, err := n.sn.View(ctx, "again", chainID(80)); err != nil {
		t.Fatal(err)
	}
	dir, err := committedDir(ctx, n.sn.overlay, chainID(80))
	if err != nil {
		t.Fatal(err)
	}
	n.viewLinksStore(t, id, filepath.Join(dir, "hub", hfcache.Folder("org/m"), "snapshots", storetest.Revision))
}
