package snapshotter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/testsuite"
	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// TestSnapshotterSuite runs containerd's snapshotter conformance suite:
// ordinary layers behave exactly like containerd's overlayfs snapshotter.
func TestSnapshotterSuite(t *testing.T) {
	testenv.RequireRoot(t, "the overlay snapshotter's suite")
	// The name selects the suite's known differences: ordinary layers are
	// containerd's overlayfs (no directory renames across layers without
	// redirect_dir).
	testsuite.SnapshotterSuite(t, "overlayfs", func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
		d, err := store.Open(ctx, filepath.Join(root, "store"), nil)
		if err != nil {
			return nil, nil, err
		}
		rt, err := resolve.New(resolve.Config{Mode: resolve.Required, Root: d.Root()})
		if err != nil {
			return nil, nil, err
		}
		sn, err := New(ctx, Config{Root: filepath.Join(root, "snapshots"), Store: d, Resolver: rt})
		if err != nil {
			return nil, nil, err
		}
		return sn, sn.Close, nil
	})
}

// TestWeightLayer: a weight layer's Prepare commits a snapshot under the
// chain ID whose files are the store's inodes and answers ErrAlreadyExists;
// the snapshot alone holds no lease, a container's rootfs over it holds the
// artifact's lease until it is removed, and a restart takes the lease again
// from the snapshots' labels and parents.
func TestWeightLayer(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 1<<20, 1)
	aid := artifact.MustParseID(id)

	// An ordinary base layer, then the weight layer over it.
	if _, err := n.sn.Prepare(ctx, "base-extract", ""); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Commit(ctx, chainID(1), "base-extract"); err != nil {
		t.Fatal(err)
	}
	labels := weightLabels(id, "/models/m", chainID(2))
	n.prepareWeights(t, "extract-1 "+chainID(2), chainID(1), labels)
	info, err := n.sn.Stat(ctx, chainID(2))
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != snapshots.KindCommitted || info.Parent != chainID(1) || info.Labels[pointer.LabelIdentity] != id ||
		info.Labels[snapshots.LabelSnapshotRef] != chainID(2) {
		t.Fatalf("committed weight snapshot %+v", info)
	}
	if names := n.snapshotNames(t); len(names) != 2 {
		t.Fatalf("snapshots %v: the temporary one was left behind", names)
	}

	// Its directory holds the store's inodes, and the pointer file.
	dir, err := committedDir(ctx, n.sn.overlay, chainID(2))
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.dom.Lookup(ctx, aid, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range l.Files() {
		var a, b unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, "models/m", f.Path), &a); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fstat(int(f.File.Fd()), &b); err != nil {
			t.Fatal(err)
		}
		if a.Dev != b.Dev || a.Ino != b.Ino {
			t.Fatalf("%s: view inode %d:%d, store %d:%d", f.Path, a.Dev, a.Ino, b.Dev, b.Ino)
		}
	}
	l.Close()
	if _, err := os.Stat(filepath.Join(dir, "models/m/.weightsnap/pointers", aid.Hex()+".json")); err != nil {
		t.Fatal(err)
	}

	// Committed, unused: no lease.
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases of a weight snapshot nothing uses: %v", got)
	}
	// A container's rootfs over it sees the weights.
	if _, err := n.sn.Prepare(ctx, "container", chainID(2)); err != nil {
		t.Fatal(err)
	}

	// Held: the store refuses to remove the artifact; a restart takes it again.
	mustBusy := func() {
		t.Helper()
		if err := n.dom.Remove(ctx, aid); !errdefs.IsFailedPrecondition(err) {
			t.Fatalf("remove of a leased artifact: %v, want busy", err)
		}
	}
	mustBusy()
	n.sn.Close()
	n.open(t)
	if got := n.sn.leases.identities(); !slices.Equal(got, []string{id}) {
		t.Fatalf("leases after a restart: %v", got)
	}
	mustBusy()

	// The same layer again (another namespace's pull): no second resolution.
	calls := n.resolver.calls.Load()
	n.prepareWeights(t, "extract-2 "+chainID(2), chainID(1), labels)
	if n.resolver.calls.Load() != calls {
		t.Fatal("an existing weight snapshot was resolved again")
	}

	// Removing the container lets the lease go; the weight snapshot stays.
	if err := n.sn.Remove(ctx, "container"); err != nil {
		t.Fatal(err)
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases after the last user went: %v", got)
	}
	if err := n.dom.Remove(ctx, aid); err != nil {
		t.Fatalf("remove after the container went: %v", err)
	}
	if err := n.sn.Remove(ctx, chainID(2)); err != nil {
		t.Fatal(err)
	}
}

// TestBadLabels: every malformed pointer fails Prepare with a clear,
// invalid-argument error naming the label, and leaves no snapshot.
func TestBadLabels(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 256<<10, 2)
	for _, tc := range []struct {
		name, label string
		edit        func(map[string]string)
	}{
		{"relative target", pointer.LabelTarget, func(m map[string]string) { m[pointer.LabelTarget] = "models/x" }},
		{"dot-dot target", pointer.LabelTarget, func(m map[string]string) { m[pointer.LabelTarget] = "/models/../../etc" }},
		{"tag instead of digest", pointer.LabelArtifact, func(m map[string]string) { m[pointer.LabelArtifact] = "reg.example/models/m:latest" }},
		{"identity not sha256", pointer.LabelIdentity, func(m map[string]string) { m[pointer.LabelIdentity] = "md5:" + strings.Repeat("a", 32) }},
		{"oversized", "weightsnap.*", func(m map[string]string) { m[pointer.LabelTarget] = "/" + strings.Repeat("x", 4100) }},
		{"unknown layout", pointer.LabelLayout, func(m map[string]string) { m[pointer.LabelLayout] = "flat"; m[pointer.LabelRepo] = "org/m" }},
		{"hf layout, repo leaves", pointer.LabelRepo, func(m map[string]string) {
			m[pointer.LabelLayout] = pointer.LayoutHF
			m[pointer.LabelRepo] = "../../etc"
		}},
		{"no chain ID", snapshots.LabelSnapshotRef, func(m map[string]string) { delete(m, snapshots.LabelSnapshotRef) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels := weightLabels(id, "/models/m", chainID(9))
			tc.edit(labels)
			_, err := n.sn.Prepare(ctx, "extract "+tc.name, "", snapshots.WithLabels(labels))
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "weightsnap: ") || !strings.Contains(err.Error(), tc.label) {
				t.Fatalf("err %v, want an invalid-argument weight layer failure naming %s", err, tc.label)
			}
			if names := n.snapshotNames(t); len(names) != 0 {
				t.Fatalf("snapshots left: %v", names)
			}
		})
	}
	if n.resolver.calls.Load() != 0 {
		t.Fatal("bad labels reached resolution")
	}
}

// TestRequiredFailure: an identity that does not resolve fails Prepare
// with the typed reason, naming the artifact; nothing is left.
func TestRequiredFailure(t *testing.T) {
	n := newNode(t, t.TempDir())
	missing := "sha256:" + strings.Repeat("5", 64)
	labels := weightLabels(missing, "/w", chainID(3))
	_, err := n.sn.Prepare(context.Background(), "extract", "", snapshots.WithLabels(labels))
	var f *resolve.Failure
	if !errdefs.IsNotFound(err) || !errors.As(err, &f) || f.Kind != resolve.KindMiss ||
		!strings.Contains(err.Error(), labels[pointer.LabelArtifact]) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err %v", err)
	}
	if names := n.snapshotNames(t); len(names) != 0 {
		t.Fatalf("snapshots left: %v", names)
	}
}

// TestConcurrentPrepares: layers of one identity prepared at once resolve
// once; layers of two identities resolve at the same time; once prepared,
// with nothing using them, no lease is left.
func TestConcurrentPrepares(t *testing.T) {
	n := newNode(t, t.TempDir())
	ids := []string{n.importModel(t, 256<<10, 3), n.importModel(t, 256<<10, 4)}
	n.resolver.hold = make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Go(func() {
			labels := weightLabels(ids[i%2], "/w", chainID(10+i))
			_, err := n.sn.Prepare(context.Background(), "extract "+chainID(10+i), "", snapshots.WithLabels(labels))
			if !errdefs.IsAlreadyExists(err) {
				errs <- err
			}
		})
	}
	// Every Prepare waits on one of the two resolutions, both running.
	testenv.Eventually(t, 20*time.Second, func() bool { return n.waiting() == 6 && n.resolver.runningNow() == 2 }, "6 Prepares not waiting on 2 resolutions at once")
	close(n.resolver.hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c := n.resolver.calls.Load(); c != 2 {
		t.Fatalf("%d resolutions for 2 identities", c)
	}
	if n.resolver.maxRun != 2 {
		t.Fatalf("at most %d resolutions ran at once, want 2", n.resolver.maxRun)
	}
	if len(n.snapshotNames(t)) != 6 || len(n.sn.leases.identities()) != 0 {
		t.Fatalf("snapshots %v, leases %v", n.snapshotNames(t), n.sn.leases.identities())
	}
}

// halfDone is a producer halfway through 1 KiB.
type halfDone struct{ artifact.Producer }

func (halfDone) Progress() (int64, int64) { return 512, 1024 }

// TestResolveProgress: while a weight layer's resolution runs its
// producer, the metrics show how far it is, by identity and source, and
// forget it once it ends.
func TestResolveProgress(t *testing.T) {
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 256<<10, 5)
	n.resolver.hold, n.resolver.producing = make(chan struct{}), halfDone{}
	done := make(chan error, 1)
	go func() {
		_, err := n.sn.Prepare(context.Background(), "extract "+chainID(30), "", snapshots.WithLabels(weightLabels(id, "/w", chainID(30))))
		done <- err
	}()
	testenv.Eventually(t, 20*time.Second, func() bool {
		return testutil.ToFloat64(n.metrics.progress.WithLabelValues(id, "registry")) == 512 &&
			testutil.ToFloat64(n.metrics.progressTotal.WithLabelValues(id, "registry")) == 1024
	}, "the progress gauges not seen")
	close(n.resolver.hold)
	if err := <-done; !errdefs.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if c := testutil.CollectAndCount(n.metrics.progress); c != 0 {
		t.Fatalf("%d progress series after the resolution ended", c)
	}
}

// TestRefusesAnotherFilesystem: a snapshot root that cannot hold hardlinks
// to the store is refused at start, naming both paths.
func TestRefusesAnotherFilesystem(t *testing.T) {
	d := storetest.Open(t)
	snaps := testenv.Tmpfs(t, "16m")
	rt, _ := resolve.New(resolve.Config{Mode: resolve.Required, Root: d.Root()})
	_, err := New(context.Background(), Config{Root: snaps, Store: d, Resolver: rt})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), snaps) || !strings.Contains(err.Error(), d.Root()) {
		t.Fatalf("err %v", err)
	}
}

// TestLaterLayersResolveAhead: the Prepare of an image's first weight layer
// starts resolving the later ones its labels name, so they resolve at the
// same time although containerd prepares the layers one after the other. A
// container over the image leases all three artifacts.
func TestLaterLayersResolveAhead(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	ids := []string{n.importModel(t, 256<<10, 5), n.importModel(t, 256<<10, 6), n.importModel(t, 256<<10, 7)}
	n.resolver.hold = make(chan struct{})
	first := weightLabels(ids[0], "/a", chainID(20))
	next := pointer.Pointer{Artifact: first[pointer.LabelArtifact]}
	first[pointer.LabelNext] = ids[1] + "=" + next.Artifact + "," + ids[2] + "=" + next.Artifact
	prepared := make(chan error, 1)
	go func() {
		_, err := n.sn.Prepare(ctx, "extract-a", "", snapshots.WithLabels(first))
		prepared <- err
	}()
	// The first layer's Prepare resolves the later two ahead, all at once.
	testenv.Eventually(t, 20*time.Second, func() bool { return n.resolver.runningNow() == 3 }, "the three layers do not resolve at once")
	close(n.resolver.hold)
	if err := <-prepared; !errdefs.IsAlreadyExists(err) {
		t.Fatalf("Prepare of a weight layer: %v, want ErrAlreadyExists", err)
	}
	second := weightLabels(ids[1], "/b", chainID(21))
	second[pointer.LabelNext] = ids[2] + "=" + next.Artifact
	n.prepareWeights(t, "extract-b", chainID(20), second)
	n.prepareWeights(t, "extract-c", chainID(21), weightLabels(ids[2], "/c", chainID(22)))
	if n.resolver.maxRun != 3 {
		t.Fatalf("at most %d resolutions ran at once, want 3", n.resolver.maxRun)
	}
	if _, err := n.sn.Stat(ctx, chainID(22)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.sn.Prepare(ctx, "container", chainID(22)); err != nil {
		t.Fatal(err)
	}
	if got := n.sn.leases.identities(); len(got) != 3 {
		t.Fatalf("leases %v", got)
	}
	if err := n.sn.Remove(ctx, "container"); err != nil {
		t.Fatal(err)
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases after the container went: %v", got)
	}
}

// TestSameLayerOverAnotherParent: the same image unpacked in two containerd
// namespaces gives one weight layer (one chain ID) over two parents (each
// namespace's own base snapshot): two snapshots, and one lease while a
// container of either uses it.
func TestSameLayerOverAnotherParent(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	id := n.importModel(t, 256<<10, 8)
	for _, ns := range []string{"ns1", "ns2"} {
		if _, err := n.sn.Prepare(ctx, ns+"/extract-base", ""); err != nil {
			t.Fatal(err)
		}
		if err := n.sn.Commit(ctx, ns+"/"+chainID(30), ns+"/extract-base"); err != nil {
			t.Fatal(err)
		}
		n.prepareWeights(t, ns+"/extract-weights", ns+"/"+chainID(30), weightLabels(id, "/w", chainID(31)))
	}
	second := chainID(31) + "@ns2/" + chainID(30)
	for name, parent := range map[string]string{chainID(31): "ns1/" + chainID(30), second: "ns2/" + chainID(30)} {
		info, err := n.sn.Stat(ctx, name)
		if err != nil || info.Parent != parent || info.Labels[snapshots.LabelSnapshotRef] != chainID(31) {
			t.Fatalf("%s: %+v %v", name, info, err)
		}
	}
	for key, parent := range map[string]string{"ns1/container": chainID(31), "ns2/container": second} {
		if _, err := n.sn.Prepare(ctx, key, parent); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"ns1/container", chainID(31)} {
		if err := n.sn.Remove(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.sn.leases.identities(); len(got) != 1 {
		t.Fatalf("the other namespace's container lost its lease: %v", got)
	}
	if err := n.sn.Remove(ctx, "ns2/container"); err != nil {
		t.Fatal(err)
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases %v", got)
	}
}
