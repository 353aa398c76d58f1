package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestReleaseEmptiesAndRefills (issue 32, item 2, outside containerd's CRI
// namespace): the store's eviction of an artifact whose weight snapshot
// nothing uses empties that snapshot, so the bytes come back; while a
// container uses it the release refuses and the eviction takes nothing;
// the next container over the emptied snapshot gets the weights again,
// or fails when the artifact does not resolve, never running without them.
func TestReleaseEmptiesAndRefills(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	ev, err := evict.New(n.dom)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetReleaser(n.sn)
	src := storetest.Synth(t, synth.Options{Size: 256 << 10, Shards: 2, DType: "BF16", Seed: 32})
	id := importInto(t, n.dom, src)
	aid := artifact.MustParseID(id)
	layer := chainID(32)
	n.prepareWeights(t, "extract", "", weightLabels(id, "/w", layer))
	dir, err := committedDir(ctx, n.sn.overlay, layer)
	if err != nil {
		t.Fatal(err)
	}
	weights := func() []os.DirEntry {
		ents, _ := os.ReadDir(filepath.Join(dir, "w"))
		return ents
	}
	evictAll := func() int {
		rep, err := ev.To(ctx, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		return len(rep.Evicted)
	}

	// In use: the release refuses, the eviction takes nothing.
	if _, err := n.sn.Prepare(ctx, "running", layer); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Release(ctx, aid); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("release of an artifact a container uses: %v, want busy", err)
	}
	if got := evictAll(); got != 0 || len(weights()) < 2 {
		t.Fatalf("with a container running: %d evicted, %d files in its weight snapshot", got, len(weights()))
	}
	if err := n.sn.Remove(ctx, "running"); err != nil {
		t.Fatal(err)
	}

	// Unused: the eviction empties the snapshot, the bytes come back.
	if got := evictAll(); got != 1 {
		t.Fatalf("%d evicted of an unused artifact, want 1", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the evicted artifact's weight snapshot still holds %v", ents)
	}
	if got := n.views(t, id); len(got) != 0 {
		t.Fatalf("the evicted artifact's shared views: %v, want none", got)
	}
	info, err := n.sn.Stat(ctx, layer)
	if err != nil || info.Labels[LabelEmptied] == "" {
		t.Fatalf("the emptied weight snapshot is not marked: %v %v", info.Labels, err)
	}

	// The artifact does not resolve: no container over it.
	if _, err := n.sn.Prepare(ctx, "without", layer); err == nil || !errdefs.IsNotFound(err) {
		t.Fatalf("Prepare over an emptied snapshot whose artifact is gone: %v, want not found", err)
	}
	if _, err := n.sn.Stat(ctx, "without"); !errdefs.IsNotFound(err) {
		t.Fatalf("the failed Prepare left its snapshot: %v", err)
	}

	// It resolves again: the container gets the store's very inodes.
	importInto(t, n.dom, src)
	if _, err := n.sn.View(ctx, "again", layer); err != nil {
		t.Fatal(err)
	}
	if info, _ := n.sn.Stat(ctx, layer); info.Labels[LabelEmptied] != "" {
		t.Fatal("the refilled weight snapshot is still marked emptied")
	}
	n.viewLinksStore(t, id, filepath.Join(dir, "w"))
	if got := n.sn.leases.identities(); len(got) != 1 || got[0] != id {
		t.Fatalf("leases of the view over the refilled snapshot: %v", got)
	}
}

// TestRefillAfterACrashInRelease: a release marks a weight snapshot
// emptied, then exchanges its link to the shared view (or, filled before
// views were shared, its own view) for an empty directory and removes
// the old; a crash at any step leaves a marked snapshot, and the next
// container over it gets the whole view again, the store's inodes, and
// the mark goes.
func TestRefillAfterACrashInRelease(t *testing.T) {
	for i, tc := range []struct {
		name  string
		crash func(t *testing.T, dir string) // what the crash left at the snapshot's directory
	}{
		{"still linked", func(t *testing.T, dir string) {}},
		{"emptied, the old link left", func(t *testing.T, dir string) {
			if err := os.Rename(dir, dir+".weightsnap-empty"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"own view half removed", func(t *testing.T, dir string) {
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "w"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "w", "config.json"), []byte("{}"), 0o444); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			n := newNode(t, t.TempDir())
			src := storetest.Synth(t, synth.Options{Size: 256 << 10, Shards: 2, DType: "BF16", Seed: uint64(33 + i)})
			id := importInto(t, n.dom, src)
			layer := chainID(33)
			n.prepareWeights(t, "extract", "", weightLabels(id, "/w", layer))
			info, err := n.sn.Stat(ctx, layer)
			if err != nil {
				t.Fatal(err)
			}
			info.Labels[LabelEmptied] = "2026-12-02T00:00:00Z" // marked, as Release does first
			if _, err := n.sn.overlay.Update(ctx, info, "labels"); err != nil {
				t.Fatal(err)
			}
			dir, err := committedDir(ctx, n.sn.overlay, layer)
			if err != nil {
				t.Fatal(err)
			}
			tc.crash(t, dir)
			if err := n.sn.Cleanup(ctx); err != nil { // the view stays while the snapshot may link to it
				t.Fatal(err)
			}
			if _, err := n.sn.Prepare(ctx, "container", layer); err != nil {
				t.Fatal(err)
			}
			if info, _ := n.sn.Stat(ctx, layer); info.Labels[LabelEmptied] != "" {
				t.Fatal("the refilled weight snapshot is still marked emptied")
			}
			if fi, err := os.Lstat(dir); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the refilled weight snapshot's directory: %v %v, want a link to its shared view", fi, err)
			}
			n.viewLinksStore(t, id, filepath.Join(dir, "w"))
		})
	}
}

// TestPrepareCutBeforeItsFill: a weight layer's Prepare commits its
// snapshot marked emptied, then fills it and removes the mark; a crash
// between leaves a marked, empty snapshot, and the next container over it
// gets the weights first.
func TestPrepareCutBeforeItsFill(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 128<<10, 41)
	layer := chainID(41)
	n.prepareWeights(t, "extract", "", weightLabels(id, "/w", layer))
	info, err := n.sn.overlay.Stat(ctx, layer)
	if err != nil || info.Labels[LabelEmptied] != "" {
		t.Fatalf("a finished Prepare's snapshot: %v, labels %v; want no %s", err, info.Labels, LabelEmptied)
	}

	// What a crash after the commit leaves: the snapshot marked, no files.
	cut := chainID(42)
	if _, err := n.sn.overlay.Prepare(ctx, "cut", ""); err != nil {
		t.Fatal(err)
	}
	labels := weightLabels(id, "/w", cut)
	labels[LabelEmptied] = "2026-12-02T00:00:00Z"
	if err := n.sn.overlay.Commit(ctx, cut, "cut", snapshots.WithLabels(labels)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.sn.Prepare(ctx, "container", cut); err != nil {
		t.Fatal(err)
	}
	dir, err := committedDir(ctx, n.sn.overlay, cut)
	if err != nil {
		t.Fatal(err)
	}
	n.viewLinksStore(t, id, filepath.Join(dir, "w"))
	if info, err := n.sn.overlay.Stat(ctx, cut); err != nil || info.Labels[LabelEmptied] != "" {
		t.Fatalf("the cut snapshot after a container over it: %v, labels %v", err, info.Labels)
	}
}
