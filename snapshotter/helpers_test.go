package snapshotter

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

const testRevision = "0123456789abcdef0123456789abcdef01234567"

// node is a store, a resolution runtime and a snapshotter in one directory.
type node struct {
	root     string
	dom      *store.Domain
	resolver *countingResolver
	sn       *Snapshotter
}

// newNode opens a store at dir/store and a snapshotter at dir/snapshots
// (root needed: the overlay snapshotter mounts).
func newNode(t testing.TB, dir string) *node {
	t.Helper()
	harness.RequireRoot(t)
	ctx := context.Background()
	n := &node{root: dir}
	var err error
	if n.dom, err = store.Open(ctx, filepath.Join(dir, "store"), nil); err != nil {
		t.Fatal(err)
	}
	rt, err := resolve.New(resolve.Config{Mode: resolve.Required, Root: n.dom.Root()})
	if err != nil {
		t.Fatal(err)
	}
	n.resolver = &countingResolver{inner: rt}
	n.open(t)
	return n
}

// open (re)opens the snapshotter.
func (n *node) open(t testing.TB) {
	t.Helper()
	sn, err := New(context.Background(), Config{Root: filepath.Join(n.root, "snapshots"), Store: n.dom, Resolver: n.resolver})
	if err != nil {
		t.Fatal(err)
	}
	n.sn = sn
	t.Cleanup(func() { sn.Close() })
}

// importModel synthesises a checkpoint and imports it; it returns the identity digest.
func (n *node) importModel(t testing.TB, size int64, seed uint64) string {
	t.Helper()
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "ckpt")
	if err := synth.Write(ctx, src, synth.Options{Size: size, Shards: 2, DType: "BF16", Seed: seed}); err != nil {
		t.Fatal(err)
	}
	l, _, err := resolve.Import(ctx, n.dom, resolve.ImportRequest{Dir: src, Revision: testRevision, Repository: "org/m"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "sha256:" + l.ID
}

// weightLabels are the labels containerd passes to the Prepare of a
// pointer layer whose chain ID is chainID.
func weightLabels(identity, target, chainID string) map[string]string {
	return map[string]string{
		oci.LabelArtifact:                "reg.example/models/m@sha256:" + strings.Repeat("2", 64),
		oci.LabelIdentity:                identity,
		oci.LabelTarget:                  target,
		snapshots.LabelSnapshotRef:       chainID,
		"containerd.io/snapshot/diff-id": "sha256:" + strings.Repeat("4", 64),
	}
}

func chainID(i int) string { return fmt.Sprintf("sha256:%064x", i) }

// prepareWeights runs a weight layer's Prepare and checks it answered
// ErrAlreadyExists.
func (n *node) prepareWeights(t testing.TB, key, parent string, labels map[string]string) {
	t.Helper()
	if _, err := n.sn.Prepare(context.Background(), key, parent, snapshots.WithLabels(labels)); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("Prepare of a weight layer: %v, want ErrAlreadyExists", err)
	}
}

// snapshotNames lists every snapshot.
func (n *node) snapshotNames(t testing.TB) []string {
	t.Helper()
	var names []string
	if err := n.sn.Walk(context.Background(), func(_ context.Context, i snapshots.Info) error {
		names = append(names, i.Name)
		return nil
	}); err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return names
}

// countingResolver counts resolutions, can hold them for a while, and
// records how many ran at once.
type countingResolver struct {
	inner   Resolver
	delay   time.Duration
	calls   atomic.Int32
	mu      sync.Mutex
	running int
	maxRun  int
}

func (c *countingResolver) Resolve(ctx context.Context, req resolve.Request) (*resolve.Resolution, error) {
	c.calls.Add(1)
	c.mu.Lock()
	c.running++
	c.maxRun = max(c.maxRun, c.running)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running--
		c.mu.Unlock()
	}()
	time.Sleep(c.delay)
	return c.inner.Resolve(ctx, req)
}
