package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// Options shape a fleet.
type Options struct {
	Nodes    int    // nodes created; a round uses the first few
	Size     string // artifact size (weightsnap dev synth --size), e.g. "256MiB"
	Shards   int
	RateMbit int // every link's rate in both directions, Mbit/s (0: unshaped)
	// Congestion is the TCP congestion control of the origin and every node (their namespaces'
	// net.ipv4.tcp_congestion_control); empty is cubic, Linux's default, whatever the host runs.
	Congestion string
}

// defaultCongestion is Linux's default TCP congestion control, which a new namespace would otherwise
// take from the host's.
const defaultCongestion = "cubic"

// Fleet is a bridge, an origin registry holding one artifact, and nodes, each in its own network
// namespace; every link is a veth pair from the namespace to the bridge.
type Fleet struct {
	t             *testing.T
	opts          Options
	tools         *harness.Tools
	tc, flock, ws string
	dir           string    // the barrier's lock files, the identity file, the logs of rounds
	tag           string    // the unique part of interface names
	ends          []vethEnd // both ends of every link, to shape
	origin        *harness.NS
	originIf      string
	repo          string // the registry repository resolve reads: host/repo
	identity      string // the artifact's identity document
	ID            string // the artifact's identity digest
	Bytes         int64  // the artifact's payload bytes (the sum of its files)
	nodes         []*node
	rounds        int
}

// vethEnd is one end of a link: shaping its egress shapes one direction.
type vethEnd struct{ ns, dev string }

// node is one namespace with its store on a tmpfs.
type node struct {
	ns    *harness.NS
	addr  string // peer serve's address, IP:7420
	root  string // its store, on its tmpfs
	serve *harness.Proc
	// serveCmd is the command its peer serve runs, before the arguments:
	// nil for bin/weightsnap; a fault test sets another binary or an env(1)
	// prefix before a round (faultyServe).
	serveCmd []string
}

const (
	subnet    = "10.233.60."
	peerPort  = 7420
	bridgeDev = "br0"
)

// Start builds the fleet: the bridge, the origin's registry with the synthesised artifact pushed to
// it, the nodes (empty stores, nothing running), and the links shaped at opts.RateMbit.
func Start(t *testing.T, opts Options) *Fleet {
	t.Helper()
	testenv.RequireRoot(t, "a fleet of network namespaces")
	f := &Fleet{t: t, opts: opts, tools: harness.Peers(t), dir: harness.TempDir(t)}
	for _, tool := range []struct {
		dst  *string
		name string
	}{{&f.tc, "tc"}, {&f.flock, "flock"}} {
		*tool.dst = testenv.LookPath(t, tool.name, "Debian iproute2, util-linux")
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f.ws = filepath.Join(root, "bin", "weightsnap")
	if fi, err := os.Stat(f.ws); err != nil || fi.Mode()&0o111 == 0 {
		testenv.Skip(t, "bin/weightsnap is not built (run make build)")
	}
	var tag [3]byte
	if _, err := rand.Read(tag[:]); err != nil {
		t.Fatal(err)
	}
	f.tag = hex.EncodeToString(tag[:])

	br := harness.NetNS(t, "fbr")
	f.ip("-n", br.Name, "link", "add", bridgeDev, "type", "bridge")
	f.ip("-n", br.Name, "link", "set", bridgeDev, "up")
	if f.opts.Congestion == "" {
		f.opts.Congestion = defaultCongestion
	}
	f.allowCongestion()
	f.origin = harness.NetNS(t, "forg")
	f.congestion(f.origin)
	f.originIf = f.attach(br, f.origin, "o", subnet+"1/24")
	f.seed()
	for i := range opts.Nodes {
		ns := harness.NetNS(t, fmt.Sprintf("fn%d", i))
		f.congestion(ns)
		ip := fmt.Sprintf("%s%d", subnet, 10+i)
		f.attach(br, ns, strconv.Itoa(i), ip+"/24")
		mnt := f.tmpfs(2*f.Bytes + 64<<20)
		f.nodes = append(f.nodes, &node{ns: ns, addr: fmt.Sprintf("%s:%d", ip, peerPort), root: filepath.Join(mnt, "store")})
	}
	f.Shape(opts.RateMbit)
	return f
}

// ip runs ip(8) with args, failing the test on an error.
func (f *Fleet) ip(args ...string) {
	f.t.Helper()
	if _, err := harness.Run("", append([]string{f.tools.IP}, args...)...); err != nil {
		f.t.Fatal(err)
	}
}

// allowedCongestion is the host's list of the TCP congestion controls that a network namespace
// other than its own may take as its default.
const allowedCongestion = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"

// allowCongestion adds the fleet's TCP congestion control to the host's allowed list for the test's
// life: the list holds only the host's default and reno unless someone added more, so on a host
// running BBR a namespace could not take cubic.
func (f *Fleet) allowCongestion() {
	f.t.Helper()
	was, err := os.ReadFile(allowedCongestion)
	if err != nil {
		f.t.Fatal(err)
	}
	allowed := strings.Fields(string(was))
	if slices.Contains(allowed, f.opts.Congestion) {
		return
	}
	if err := os.WriteFile(allowedCongestion, []byte(strings.Join(append(allowed, f.opts.Congestion), " ")), 0o644); err != nil {
		f.t.Fatalf("allow TCP congestion control %q in namespaces (%s): %v", f.opts.Congestion, allowedCongestion, err)
	}
	f.t.Cleanup(func() {
		if err := os.WriteFile(allowedCongestion, was, 0o644); err != nil {
			f.t.Errorf("restore %s: %v", allowedCongestion, err)
		}
	})
}

// congestion sets the TCP congestion control of ns to the fleet's.
func (f *Fleet) congestion(ns *harness.NS) {
	f.t.Helper()
	if _, err := ns.Exec("sh", "-c", `echo "$1" >/proc/sys/net/ipv4/tcp_congestion_control`, "sh", f.opts.Congestion); err != nil {
		f.t.Fatalf("TCP congestion control %q: %v", f.opts.Congestion, err)
	}
}

// attach joins ns to the bridge in br with a veth pair, gives ns's end cidr and returns its name.
func (f *Fleet) attach(br, ns *harness.NS, name, cidr string) string {
	f.t.Helper()
	brIf, nsIf := "fb"+f.tag+name, "fn"+f.tag+name
	f.ip("link", "add", brIf, "netns", br.Name, "type", "veth", "peer", "name", nsIf, "netns", ns.Name)
	f.ip("-n", br.Name, "link", "set", brIf, "master", bridgeDev, "up")
	f.ip("-n", ns.Name, "addr", "add", cidr, "dev", nsIf)
	f.ip("-n", ns.Name, "link", "set", nsIf, "up")
	f.ends = append(f.ends, vethEnd{ns.Name, nsIf}, vethEnd{br.Name, brIf})
	return nsIf
}

// Shape sets every link's rate, both directions (each end's egress), to rateMbit Mbit/s with a token
// bucket; 0 removes the shaping. The bucket holds 256 KiB: more than one 64 KiB GSO packet, about 20
// ms at 100 Mbit/s.
func (f *Fleet) Shape(rateMbit int) {
	f.t.Helper()
	for _, e := range f.ends {
		f.shapeEnd(e, rateMbit)
	}
	f.opts.RateMbit = rateMbit
}

// ShapeOrigin sets the origin's link alone, both directions, to rateMbit Mbit/s, after Shape: a
// registry slower or faster than the nodes' links.
func (f *Fleet) ShapeOrigin(rateMbit int) {
	f.t.Helper()
	for _, e := range f.ends {
		if strings.HasSuffix(e.dev, f.tag+"o") { // attach's names of the origin's two ends
			f.shapeEnd(e, rateMbit)
		}
	}
}

// shapeEnd sets the egress of one end of a link to rateMbit Mbit/s; 0 removes the shaping.
func (f *Fleet) shapeEnd(e vethEnd, rateMbit int) {
	f.t.Helper()
	if rateMbit == 0 {
		_, _ = harness.Run("", f.tc, "-n", e.ns, "qdisc", "del", "dev", e.dev, "root")
		return
	}
	if _, err := harness.Run("", f.tc, "-n", e.ns, "qdisc", "replace", "dev", e.dev, "root", "tbf",
		"rate", fmt.Sprintf("%dmbit", rateMbit), "burst", "256kb", "latency", "50ms"); err != nil {
		f.t.Fatal(err)
	}
}

// tmpfs mounts a tmpfs of size bytes on a new harness directory (its cleanup unmounts it).
func (f *Fleet) tmpfs(size int64) string {
	f.t.Helper()
	dir := harness.TempDir(f.t)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		testenv.Skip(f.t, "cannot mount a tmpfs: "+err.Error())
	}
	return dir
}

// StoreSize resizes the tmpfs of node i's store to size bytes (a remount; what it holds must fit).
func (f *Fleet) StoreSize(i int, size int64) {
	f.t.Helper()
	mnt := filepath.Dir(f.nodes[i].root)
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
		f.t.Fatalf("resize the store tmpfs of node %d to %d bytes: %v", i, size, err)
	}
}

// seed starts the origin registry on a tmpfs and pushes the synthesised artifact to it from inside
// the origin's namespace (over its loopback: the origin interface's counters start at the fleet).
func (f *Fleet) seed() {
	t := f.t
	t.Helper()
	size, err := bytefmt.Parse(f.opts.Size)
	if err != nil {
		t.Fatal(err)
	}
	reg := harness.StartRegistryIn(t, f.origin, subnet+"1:5000", f.tmpfs(size+64<<20))
	f.repo = reg.Host + "/fleet/model"
	work := harness.TempDir(t)
	store, src := filepath.Join(work, "store"), filepath.Join(work, "src")
	ws := func(args ...string) string {
		t.Helper()
		out, err := f.origin.Exec(append([]string{f.ws, "--root", store, "--config", ""}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	ws("dev", "synth", "--out", src, "--size", f.opts.Size, "--shards", strconv.Itoa(f.opts.Shards), "--dtype", "BF16", "--seed", "5")
	files, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range files {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		f.Bytes += fi.Size()
	}
	f.ID = ws("import", src, "--revision", storetest.Revision, "--repository", "fleet/model")
	ws("push", "--plain-http", f.ID, f.repo+":v1")
	var info struct {
		Identity json.RawMessage `json:"identity"`
	}
	if err := json.Unmarshal([]byte(ws("inspect", "--json", f.ID)), &info); err != nil {
		t.Fatal(err)
	}
	f.identity = filepath.Join(f.dir, "identity.json")
	if err := os.WriteFile(f.identity, info.Identity, 0o644); err != nil {
		t.Fatal(err)
	}
	removeStore(work) // the seed's copies: the registry's is the only one left
}

// removeStore removes a directory holding stores (their artifacts are read-only).
func removeStore(dir string) {
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// poll calls ready until it returns nil, for at most timeout, waiting a little longer each time.
func poll(timeout time.Duration, ready func() error) error {
	b := &backoff.ExponentialBackOff{InitialInterval: 5 * time.Millisecond, Multiplier: 2, MaxInterval: 200 * time.Millisecond}
	_, err := backoff.Retry(context.Background(), func() (struct{}, error) { return struct{}{}, ready() },
		backoff.WithBackOff(b), backoff.WithMaxElapsedTime(timeout))
	return err
}
