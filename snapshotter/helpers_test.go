package snapshotter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// node is a store, a resolution runtime and a snapshotter in one directory.
type node struct {
	root     string
	dom      *store.Domain
	resolver *countingResolver
	mode     resolve.Mode // the snapshotter's; "" is required
	metrics  *Metrics
	sn       *Snapshotter
}

// newNode opens a store at dir/store and a snapshotter at dir/snapshots
// (root needed: the overlay snapshotter mounts).
func newNode(t testing.TB, dir string) *node {
	t.Helper()
	testenv.RequireRoot(t, "the overlay snapshotter")
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
	n.metrics = NewMetrics()
	sn, err := New(context.Background(), Config{Root: filepath.Join(n.root, "snapshots"), Store: n.dom, Resolver: n.resolver,
		Mode: n.mode, Retry: Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Metrics: n.metrics})
	if err != nil {
		t.Fatal(err)
	}
	n.sn = sn
	t.Cleanup(func() { sn.Close() })
}

// importModel synthesises a checkpoint and imports it; it returns the identity digest.
func (n *node) importModel(t testing.TB, size int64, seed uint64) string {
	t.Helper()
	return importInto(t, n.dom, storetest.Synth(t, synth.Options{Size: size, Shards: 2, DType: "BF16", Seed: seed}))
}

// importInto imports the checkpoint src into d; it returns the identity
// digest, the same for every store.
func importInto(t testing.TB, d *store.Domain, src string) string {
	t.Helper()
	l, _, err := resolve.Import(context.Background(), d, resolve.ImportRequest{Dir: src, Revision: storetest.Revision, Repository: "org/m"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.ID.String()
}

// elsewhere is the identity of the checkpoint src, computed in a store of
// its own: the node's store does not have it.
func elsewhere(t testing.TB, src string) string {
	t.Helper()
	return importInto(t, storetest.Open(t), src)
}

// weightLabels are the labels containerd passes to the Prepare of a
// pointer layer whose chain ID is chainID.
func weightLabels(identity, target, chainID string) map[string]string {
	return map[string]string{
		pointer.LabelArtifact:            "reg.example/models/m@sha256:" + strings.Repeat("2", 64),
		pointer.LabelIdentity:            identity,
		pointer.LabelTarget:              target,
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

// countingResolver counts resolutions, can hold them until the test lets
// them go, and records how many ran at once.
type countingResolver struct {
	inner Resolver
	// hold, if set, holds every resolution until it is closed.
	hold chan struct{}
	// producing, if set, is announced to the request's OnProduce before
	// the hold, as the producer of a source "registry".
	producing artifact.Producer
	calls     atomic.Int32
	mu        sync.Mutex
	running   int
	maxRun    int
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
	if c.producing != nil && req.OnProduce != nil {
		req.OnProduce("registry", c.producing)
	}
	if c.hold != nil {
		select {
		case <-c.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.inner.Resolve(ctx, req)
}

func (c *countingResolver) Trusted(ctx context.Context, id artifact.ID, ref string) error {
	return c.inner.Trusted(ctx, id, ref)
}

// runningNow is how many resolutions run now.
func (c *countingResolver) runningNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// waiting is how many Prepares wait for a resolution in flight.
func (n *node) waiting() int {
	l := n.sn.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	w := 0
	for _, f := range l.flights {
		w += f.waiters
	}
	return w
}

// isStoreInode says whether path is the store's open file f: the same
// device and inode.
func isStoreInode(t testing.TB, path string, f *os.File) bool {
	t.Helper()
	var have, want unix.Stat_t
	if err := unix.Stat(path, &have); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(f.Fd()), &want); err != nil {
		t.Fatal(err)
	}
	return have.Dev == want.Dev && have.Ino == want.Ino
}

// serveHostMounts serves the node's host mounts on a control socket of
// its own until the test ends and returns a client of it.
func (n *node) serveHostMounts(t testing.TB) *control.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	srv, err := control.Listen(context.Background(), sock, control.Services{Mounts: n.sn.HostMounts()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return control.NewClient(sock)
}

// viewLinksStore fails unless every file of the store's artifact id is at
// its path under root as the store's very inode.
func (n *node) viewLinksStore(t testing.TB, id, root string) {
	t.Helper()
	l, err := n.dom.Lookup(context.Background(), artifact.MustParseID(id), store.ManifestAndMetadata)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, f := range l.Files() {
		var have, want unix.Stat_t
		if err := unix.Stat(filepath.Join(root, f.Path), &have); err != nil {
			t.Fatalf("%s missing from the view: %v", f.Path, err)
		}
		if err := unix.Fstat(int(f.File.Fd()), &want); err != nil || have.Dev != want.Dev || have.Ino != want.Ino {
			t.Fatalf("%s in the view is not the store's inode", f.Path)
		}
	}
}

// writePointerLayer writes into dir what unpacking ptr's pointer layer
// writes: the pointer file and the notice, read-only.
func writePointerLayer(t testing.TB, dir string, ptr pointer.Pointer) {
	t.Helper()
	body, err := pointer.File(ptr)
	if err != nil {
		t.Fatal(err)
	}
	pf := filepath.Join(dir, pointer.Path(ptr))
	if err := os.MkdirAll(filepath.Dir(pf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pf, body, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pointer.NoticePath(ptr)), pointer.Notice(ptr), 0o444); err != nil {
		t.Fatal(err)
	}
}

// filesPerFolder is how many of a model's small files share a folder.
const filesPerFolder = 50

// manyFilesModel writes a model of 8 files (a checkpoint of 6 shards,
// config.json and the shard index) and extra small files beside it: the
// tokenizers, configs and vocabularies of many languages, filesPerFolder
// in a folder.
func manyFilesModel(t testing.TB, extra int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if err := synth.Write(context.Background(), dir, synth.Options{Size: 8 << 20, Shards: 6, DType: "BF16", Seed: uint64(extra) + 34}); err != nil {
		t.Fatal(err)
	}
	names := []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "merges.txt", "generation_config.json"}
	buf := make([]byte, 64<<10)
	for i := range extra {
		p := filepath.Join(dir, fmt.Sprintf("lang-%02d", i/filesPerFolder), fmt.Sprintf("%02d-%s", i%filesPerFolder, names[i%len(names)]))
		if i%filesPerFolder == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		fill(buf, uint64(i))
		if err := os.WriteFile(p, buf[:4096+(i*37)%61440], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fill writes deterministic bytes of seed into b.
func fill(b []byte, seed uint64) {
	s := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		b[i] = byte(s)
	}
}
