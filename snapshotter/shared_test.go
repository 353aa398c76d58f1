package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// linkOf is where the committed weight snapshot name's directory links
// to ("" when it is no link), and that directory.
func (n *node) linkOf(t *testing.T, name string) (target, dir string) {
	t.Helper()
	dir, err := committedDir(context.Background(), n.sn.overlay, name)
	if err != nil {
		t.Fatal(err)
	}
	target, _ = os.Readlink(dir)
	return target, dir
}

// views lists the shared views of the artifact id.
func (n *node) views(t *testing.T, id string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(n.sn.views.dir, artifact.MustParseID(id).Hex()))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestWeightSnapshotsShareAView: weight snapshots of one artifact at one
// target, over different parents, link to one view (of the store's
// inodes); another target is another view; Cleanup removes a view once
// no snapshot links to it, and the artifact's folder with the last.
func TestWeightSnapshotsShareAView(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 128<<10, 60)
	if _, err := n.sn.Prepare(ctx, "base-extract", ""); err != nil {
		t.Fatal(err)
	}
	base := chainID(1)
	if err := n.sn.Commit(ctx, base, "base-extract"); err != nil {
		t.Fatal(err)
	}
	a, b, c := chainID(61), chainID(62), chainID(63)
	n.prepareWeights(t, "extract a", "", weightLabels(id, "/w", a))
	n.prepareWeights(t, "extract b", base, weightLabels(id, "/w", b))
	n.prepareWeights(t, "extract c", base, weightLabels(id, "/x", c))
	la, da := n.linkOf(t, a)
	lb, db := n.linkOf(t, b)
	lc, dc := n.linkOf(t, c)
	if la == "" || la != lb || lc == "" || lc == la {
		t.Fatalf("links of the weight snapshots: /w %q and %q, /x %q: want one view for /w, another for /x", la, lb, lc)
	}
	for _, d := range []string{filepath.Join(da, "w"), filepath.Join(db, "w"), filepath.Join(dc, "x")} {
		n.viewLinksStore(t, id, d)
	}
	for _, name := range []string{a, b, c} {
		info, err := n.sn.Stat(ctx, name)
		if err != nil || info.Labels[LabelView] == "" {
			t.Fatalf("weight snapshot %s: %v, labels %v: want %s", name, err, info.Labels, LabelView)
		}
	}

	for _, step := range []struct {
		remove string
		views  int
	}{{"", 2}, {a, 2}, {b, 1}, {c, 0}} {
		if step.remove != "" {
			if err := n.sn.Remove(ctx, step.remove); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.sn.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		if got := n.views(t, id); len(got) != step.views {
			t.Fatalf("after removing %q and a Cleanup: views %v, want %d", step.remove, got, step.views)
		}
	}
	if _, err := os.Stat(filepath.Join(n.sn.views.dir, artifact.MustParseID(id).Hex())); !os.IsNotExist(err) {
		t.Fatalf("the folder of an artifact with no views: %v, want it gone", err)
	}
	if _, err := os.Stat(lc); !os.IsNotExist(err) {
		t.Fatalf("the view no snapshot links to: %v, want it gone", err)
	}
}

// TestSharedViewOfANewCopy: a view of an artifact the store removed and
// got again (other inodes) is built again for the next weight snapshot,
// so no snapshot serves files the store no longer has.
func TestSharedViewOfANewCopy(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	src := storetest.Synth(t, synth.Options{Size: 128 << 10, Shards: 2, DType: "BF16", Seed: 64})
	id := importInto(t, n.dom, src)
	a, b := chainID(64), chainID(65)
	n.prepareWeights(t, "extract a", "", weightLabels(id, "/w", a))
	if err := n.dom.Remove(ctx, artifact.MustParseID(id)); err != nil {
		t.Fatal(err)
	}
	importInto(t, n.dom, src)
	n.prepareWeights(t, "extract b", "", weightLabels(id, "/w", b))
	la, da := n.linkOf(t, a)
	lb, db := n.linkOf(t, b)
	if la != lb {
		t.Fatalf("links %q and %q: want one view", la, lb)
	}
	n.viewLinksStore(t, id, filepath.Join(db, "w"))
	n.viewLinksStore(t, id, filepath.Join(da, "w")) // the path is the new view's
	if got := n.views(t, id); len(got) != 1 {
		t.Fatalf("views %v, want the new one alone", got)
	}
}

// TestSharedViewsLeftovers: the folders a crash left half made (.new-)
// or half removed (.old-) are removed at start; whole views stay.
func TestSharedViewsLeftovers(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 64<<10, 66)
	n.prepareWeights(t, "extract", "", weightLabels(id, "/w", chainID(66)))
	dir := filepath.Join(n.sn.views.dir, artifact.MustParseID(id).Hex())
	for _, p := range []string{filepath.Join(dir, sharedTemp+"1", "fs", "w"), filepath.Join(n.sn.views.dir, sharedOld+"2", "k", "fs")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.sn.Close()
	n.open(t)
	if got := n.views(t, id); len(got) != 1 || isShadow(got[0]) {
		t.Fatalf("views after a restart: %v, want the whole one alone", got)
	}
	if _, err := os.Stat(filepath.Join(n.sn.views.dir, sharedOld+"2")); !os.IsNotExist(err) {
		t.Fatalf("a half removed folder after a restart: %v", err)
	}
	if _, err := n.sn.Prepare(ctx, "container", chainID(66)); err != nil {
		t.Fatal(err)
	}
	_, d := n.linkOf(t, chainID(66))
	n.viewLinksStore(t, id, filepath.Join(d, "w"))
}
