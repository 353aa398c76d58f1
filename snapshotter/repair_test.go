package snapshotter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"golang.org/x/sys/unix"
)

// TestModes: a weight layer whose artifact cannot be had fails its Prepare
// in required mode and falls back in preferred mode; the image's mode label
// wins over the node's.
func TestModes(t *testing.T) {
	id := elsewhere(t, storetest.Synth(t, synth.Options{Size: 128 << 10, Shards: 2, DType: "BF16", Seed: 20}))
	for _, tc := range []struct {
		node     resolve.Mode
		image    string
		fallback bool
	}{
		{resolve.Required, "", false},
		{resolve.Preferred, "", true},
		{resolve.Required, pointer.ModePreferred, true},
		{resolve.Preferred, pointer.ModeRequired, false},
	} {
		t.Run(string(tc.node)+"/"+tc.image, func(t *testing.T) {
			n := newNodeMode(t, tc.node)
			labels := weightLabels(id, "/w", chainID(40))
			if tc.image != "" {
				labels[pointer.LabelMode] = tc.image
			}
			mounts, err := n.sn.Prepare(context.Background(), "extract", "", snapshots.WithLabels(labels))
			if !tc.fallback {
				if !errdefs.IsNotFound(err) || len(n.snapshotNames(t)) != 0 {
					t.Fatalf("Prepare: %v, snapshots %v; want a miss and nothing left", err, n.snapshotNames(t))
				}
				return
			}
			if err != nil || len(mounts) != 1 {
				t.Fatalf("Prepare: %v %v, want the fallback's mounts", err, mounts)
			}
			info, err := n.sn.Stat(context.Background(), "extract")
			if err != nil || info.Kind != snapshots.KindActive || info.Labels[LabelFallback] == "" {
				t.Fatalf("fallback snapshot %+v %v", info, err)
			}
			if got := testutil.ToFloat64(n.metrics.fallbacks); got != 1 {
				t.Fatalf("fallbacks_total %v", got)
			}
		})
	}
}

func newNodeMode(t *testing.T, mode resolve.Mode) *node {
	t.Helper()
	n := newNode(t, t.TempDir())
	if mode != resolve.Required {
		n.sn.Close()
		n.mode = mode
		n.open(t)
	}
	return n
}

// TestFallbackRepaired: a preferred weight layer whose artifact is missing
// unpacks as its pointer layer; once the artifact is in the store, the
// repair fills the committed snapshot's own directory with the store's
// inodes and drops the fallback label; a container over it takes the lease.
func TestFallbackRepaired(t *testing.T) {
	ctx := context.Background()
	n := newNodeMode(t, resolve.Preferred)
	src := storetest.Synth(t, synth.Options{Size: 256 << 10, Shards: 2, DType: "BF16", Seed: 21})
	id := elsewhere(t, src)
	labels := weightLabels(id, "/models/m", chainID(41))
	mounts, err := n.sn.Prepare(ctx, "extract", "", snapshots.WithLabels(labels))
	if err != nil {
		t.Fatal(err)
	}
	// What containerd does with the pointer layer: unpack it, commit it.
	dir, err := snapshotDir(mounts)
	if err != nil {
		t.Fatal(err)
	}
	ptr := pointer.Pointer{Artifact: labels[pointer.LabelArtifact], ID: artifact.MustParseID(id), Target: "/models/m"}
	pointerFile := filepath.Join(dir, pointer.Path(ptr))
	os.MkdirAll(filepath.Dir(pointerFile), 0o755)
	if err := os.WriteFile(pointerFile, []byte("{}\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Commit(ctx, chainID(41), "extract", snapshots.WithLabels(labels)); err != nil {
		t.Fatal(err)
	}
	if info, _ := n.sn.Stat(ctx, chainID(41)); info.Labels[LabelFallback] == "" {
		t.Fatalf("committed fallback lost its label: %+v", info.Labels)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return testutil.ToFloat64(n.metrics.repairs.WithLabelValues("unresolved")) >= 2 }, "a repair try not seen")
	if got := testutil.ToFloat64(n.metrics.pendingRepairs); got != 1 {
		t.Fatalf("pending_repairs %v", got)
	}
	// A container over the fallback started without the weights: it waits for no lease.
	if _, err := n.sn.Prepare(ctx, "early", chainID(41)); err != nil {
		t.Fatal(err)
	}
	if h, _ := n.sn.HoldersOf(artifact.MustParseID(id)); !slices.Equal(h.Pending, []string{chainID(41)}) || h.Leased {
		t.Fatalf("holders %+v", h)
	}
	if err := n.sn.Remove(ctx, "early"); err != nil {
		t.Fatal(err)
	}

	// A required image of the same layers must not run on the fallback.
	req := weightLabels(id, "/models/m", chainID(41))
	req[pointer.LabelMode] = pointer.ModeRequired
	if _, err := n.sn.Prepare(ctx, "extract-required", "", snapshots.WithLabels(req)); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "fallback") {
		t.Fatalf("a required layer over a fallback snapshot: %v, want a miss naming the fallback", err)
	}

	importInto(t, n.dom, src) // the artifact arrives
	// The repair counts itself last, after the fill and the lease.
	testenv.Eventually(t, 20*time.Second, func() bool { return testutil.ToFloat64(n.metrics.repairs.WithLabelValues("filled")) >= 1 }, "the repair not seen")
	if got := testutil.ToFloat64(n.metrics.repairs.WithLabelValues("filled")); got != 1 {
		t.Fatalf("repairs_total{filled} %v", got)
	}
	if info, err := n.sn.Stat(ctx, chainID(41)); err != nil || info.Labels[LabelFallback] != "" {
		t.Fatalf("after the repair: %v, labels %+v", err, info.Labels)
	}
	cdir, err := committedDir(ctx, n.sn.overlay, chainID(41))
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.dom.Lookup(ctx, artifact.MustParseID(id), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, f := range l.Files() {
		var a, b unix.Stat_t
		if err := unix.Stat(filepath.Join(cdir, "models/m", f.Path), &a); err != nil {
			t.Fatal(err)
		}
		unix.Fstat(int(f.File.Fd()), &b)
		if a.Ino != b.Ino {
			t.Fatalf("%s is not the store's inode", f.Path)
		}
	}
	if raw, _ := os.ReadFile(filepath.Join(cdir, pointer.Path(ptr))); !strings.Contains(string(raw), fmt.Sprintf(`"files":%d,`, len(l.Files()))) {
		t.Fatalf("pointer file after the repair: %s", raw)
	}
	if h, _ := n.sn.HoldersOf(artifact.MustParseID(id)); h.Leased || len(h.Pending) != 0 {
		t.Fatalf("holders of the repaired snapshot nothing uses %+v", h)
	}
	if _, err := n.sn.Prepare(ctx, "container", chainID(41)); err != nil {
		t.Fatal(err)
	}
	if h, _ := n.sn.HoldersOf(artifact.MustParseID(id)); !h.Leased || !slices.Equal(h.Snapshots, []string{"container"}) || len(h.Pending) != 0 {
		t.Fatalf("holders %+v", h)
	}
	if err := n.sn.Remove(ctx, "container"); err != nil {
		t.Fatal(err)
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases after the container went: %v", got)
	}
}

// TestRestartFromTheStoreOnly: at start the snapshotter takes the leases of
// the containers over weight snapshots from the store without resolving
// anything; a container whose artifact is gone from the store, and one over
// a snapshot with bad labels, do not stop the others; the gone artifact's
// containers get its lease from a background repair once the artifact is
// back; a Prepare a crash interrupted leaves nothing.
func TestRestartFromTheStoreOnly(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	keep := n.importModel(t, 128<<10, 22)
	gone := storetest.Synth(t, synth.Options{Size: 128 << 10, Shards: 2, DType: "BF16", Seed: 23})
	goneID := importInto(t, n.dom, gone)
	n.prepareWeights(t, "extract-a", "", weightLabels(keep, "/a", chainID(50)))
	n.prepareWeights(t, "extract-b", "", weightLabels(goneID, "/b", chainID(51)))
	// A snapshot with bad labels, and a crashed Prepare's view.
	if _, err := n.sn.overlay.Prepare(ctx, "bad", ""); err != nil {
		t.Fatal(err)
	}
	bad := weightLabels(keep, "relative", chainID(52))
	if err := n.sn.overlay.Commit(ctx, chainID(52), "bad", snapshots.WithLabels(bad)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.sn.overlay.Prepare(ctx, tmpView+" 1 crashed", ""); err != nil {
		t.Fatal(err)
	}
	for key, parent := range map[string]string{"container-a": chainID(50), "container-b": chainID(51), "container-bad": chainID(52)} {
		if _, err := n.sn.Prepare(ctx, key, parent); err != nil {
			t.Fatal(err)
		}
	}
	n.sn.Close()
	if err := n.dom.Remove(ctx, artifact.MustParseID(goneID)); err != nil {
		t.Fatal(err)
	}

	calls := n.resolver.calls.Load()
	n.open(t)
	if c := n.resolver.calls.Load(); c != calls {
		t.Fatalf("start-up resolved %d artifacts; it must only look in the store", c-calls)
	}
	if got := n.sn.leases.identities(); !slices.Equal(got, []string{keep}) {
		t.Fatalf("leases after the restart: %v", got)
	}
	if slices.ContainsFunc(n.snapshotNames(t), func(s string) bool { return strings.HasPrefix(s, tmpView) }) {
		t.Fatalf("the crashed Prepare's view is left: %v", n.snapshotNames(t))
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return testutil.ToFloat64(n.metrics.repairs.WithLabelValues("unresolved")) >= 1 }, "repair tries not seen")
	// The gone artifact's snapshot still serves its files (the inodes live on).
	if _, err := n.sn.Prepare(ctx, "container-b2", chainID(51)); err != nil {
		t.Fatal(err)
	}

	importInto(t, n.dom, gone) // back in the store
	// The repair counts itself last, after the lease.
	testenv.Eventually(t, 20*time.Second, func() bool { return testutil.ToFloat64(n.metrics.repairs.WithLabelValues("leased")) >= 2 }, "the lease repair not seen")
	if got := n.sn.leases.identities(); len(got) != 2 {
		t.Fatalf("leases after the repair: %v", got)
	}
	if got := testutil.ToFloat64(n.metrics.pendingRepairs); got != 0 {
		t.Fatalf("pending_repairs %v", got)
	}
	if got := testutil.ToFloat64(n.metrics.repairs.WithLabelValues("leased")); got != 2 { // container-b, container-b2
		t.Fatalf("repairs_total{leased} %v", got)
	}
}

// TestRepairEndsWithItsHolders: a fallback snapshot removed before its
// artifact resolves leaves no repair behind.
func TestRepairEndsWithItsHolders(t *testing.T) {
	ctx := context.Background()
	n := newNodeMode(t, resolve.Preferred)
	labels := weightLabels(elsewhere(t, storetest.Synth(t, synth.Options{Size: 128 << 10, Shards: 2, DType: "BF16", Seed: 24})), "/w", chainID(42))
	if _, err := n.sn.Prepare(ctx, "extract", "", snapshots.WithLabels(labels)); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Commit(ctx, chainID(42), "extract", snapshots.WithLabels(labels)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return testutil.ToFloat64(n.metrics.repairs.WithLabelValues("unresolved")) >= 1 }, "a repair try not seen")
	if err := n.sn.Remove(ctx, chainID(42)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(n.metrics.pendingRepairs); got != 0 {
		t.Fatalf("pending_repairs %v after the snapshot went", got)
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		n.sn.repairs.mu.Lock()
		defer n.sn.repairs.mu.Unlock()
		return len(n.sn.repairs.loops) == 0
	}, "the loop's end not seen")
}

// TestEvictedUnderWeightSnapshot: a weight snapshot nothing uses holds no
// lease, so the store may remove its artifact; the snapshot keeps serving
// its files (its hardlinks keep the inodes), and a container prepared over
// it then gets the lease once a repair resolves the artifact again.
func TestEvictedUnderWeightSnapshot(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	src := storetest.Synth(t, synth.Options{Size: 128 << 10, Shards: 2, DType: "BF16", Seed: 25})
	id := importInto(t, n.dom, src)
	aid := artifact.MustParseID(id)
	n.prepareWeights(t, "extract", "", weightLabels(id, "/w", chainID(43)))
	if err := n.dom.Remove(ctx, aid); err != nil {
		t.Fatalf("remove of an artifact only a committed weight snapshot has: %v", err)
	}
	calls := n.resolver.calls.Load()
	if _, err := n.sn.Prepare(ctx, "container", chainID(43)); err != nil {
		t.Fatal(err)
	}
	if h, _ := n.sn.HoldersOf(aid); h.Leased || !slices.Equal(h.Pending, []string{"container"}) {
		t.Fatalf("holders with the artifact evicted %+v", h)
	}
	dir, err := committedDir(ctx, n.sn.overlay, chainID(43))
	if err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "w")); err != nil || len(ents) < 2 {
		t.Fatalf("the snapshot's files after the eviction: %v %v", ents, err)
	}

	importInto(t, n.dom, src) // resolvable again
	testenv.Eventually(t, 20*time.Second, func() bool { return testutil.ToFloat64(n.metrics.repairs.WithLabelValues("leased")) >= 1 }, "the lease repair not seen")
	if h, _ := n.sn.HoldersOf(aid); !h.Leased || !slices.Equal(h.Snapshots, []string{"container"}) || len(h.Pending) != 0 {
		t.Fatalf("holders after the repair %+v", h)
	}
	if n.resolver.calls.Load() == calls {
		t.Fatal("the repair did not resolve the artifact again")
	}
	if err := n.dom.Remove(ctx, aid); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("remove of an artifact a container uses: %v, want busy", err)
	}
	if err := n.sn.Remove(ctx, "container"); err != nil {
		t.Fatal(err)
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases after the container went: %v", got)
	}
}
