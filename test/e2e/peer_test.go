package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// The weight peer's end-to-end tests: nodes are network
// namespaces joined by veth pairs; each runs the weightsnap CLI with its
// own store, `weightsnap peer serve` on the nodes that serve.

// node is a network namespace with a store.
type node struct {
	ns   *harness.NS
	root string
	dir  string // logs of its processes
	rma  bool   // runs the CLI built with the rma plane; its peer serve uses the sockets provider
}

func newNode(t *testing.T, name string) *node {
	dir := harness.TempDir(t)
	return &node{ns: harness.NetNS(t, name), root: filepath.Join(dir, "store"), dir: dir}
}

// ws runs the CLI inside the node's namespace on its store.
func (n *node) ws(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return n.ns.Exec(append([]string{n.bin(t), "--root", n.root, "--config", ""}, args...)...)
}

// bin is the node's CLI: with the rma plane or without.
func (n *node) bin(t *testing.T) string {
	t.Helper()
	if n.rma {
		return weightsnapRMABin(t)
	}
	return weightsnapBin(t)
}

func (n *node) wsOK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := n.ws(t, args...)
	if err != nil {
		t.Fatalf("weightsnap %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// serve starts `weightsnap peer serve` in the node on listen and waits
// until from (another node) lists it; flags go to peer serve.
func (n *node) serve(t *testing.T, listen string, from *node, addr string, flags ...string) *harness.Proc {
	t.Helper()
	argv := append([]string{n.bin(t), "--root", n.root, "--config", "", "peer", "serve", "--listen", listen, "--allow-unauthenticated"}, flags...)
	if n.rma {
		argv = append(argv, "--fabric-provider", "sockets")
	}
	p := n.ns.Start(t, n.dir, "peer-serve", argv...)
	if err := testenv.Wait(30*time.Second, func() error {
		if p.Exited() {
			return testenv.Final(errors.New("it exited"))
		}
		_, err := from.ws(t, "peer", "ls", addr)
		return err
	}); err != nil {
		t.Fatalf("peer serve in %s did not answer on %s: %v\n%s", n.ns.Name, addr, err, harness.Tail(p.Log, 20))
	}
	return p
}

// peerReport is what peer fetch --json says.
type peerReport struct {
	Identity  string   `json:"identity"`
	ID        string   `json:"id"`
	Built     bool     `json:"built"`
	Bytes     int64    `json:"bytes"`
	Fetched   int64    `json:"fetched_bytes"`
	Peer      string   `json:"peer"`
	Peers     []string `json:"peers"`
	Mode      string   `json:"mode"`
	Rails     int      `json:"rails"`
	Failovers int      `json:"failovers"`
	Restarts  int      `json:"restarts"`
	Seconds   float64  `json:"seconds"`
}

func (n *node) fetch(t *testing.T, args ...string) peerReport {
	t.Helper()
	rep, err := n.tryFetch(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func (n *node) tryFetch(t *testing.T, args ...string) (peerReport, error) {
	var rep peerReport
	out, err := n.ws(t, append([]string{"peer", "fetch", "--json"}, args...)...)
	if err == nil {
		if err = json.Unmarshal([]byte(out), &rep); err != nil {
			err = fmt.Errorf("peer fetch report: %v\n%s", err, out)
		}
	}
	return rep, err
}

// fetchAsync runs a fetch in the background; wait returns its report.
func (n *node) fetchAsync(t *testing.T, args ...string) (wait func() peerReport) {
	type result struct {
		rep peerReport
		err error
	}
	ch := make(chan result, 1)
	go func() {
		rep, err := n.tryFetch(t, args...)
		ch <- result{rep, err}
	}()
	return func() peerReport {
		t.Helper()
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.rep
	}
}

// seed synthesises a checkpoint of size and imports it into the node's store.
func (n *node) seed(t *testing.T, size string, shards int) string {
	t.Helper()
	src := filepath.Join(n.dir, "src")
	n.wsOK(t, "dev", "synth", "--out", src, "--size", size, "--shards", fmt.Sprint(shards))
	id := strings.TrimSpace(n.wsOK(t, "import", src, "--revision", storetest.Revision, "--repository", "org/peer"))
	os.RemoveAll(src)
	return id
}

// txBytes is the bytes an interface of the node has sent.
func (n *node) txBytes(t *testing.T, ifname string) int64 {
	t.Helper()
	out, err := n.ns.Exec("cat", "/sys/class/net/"+ifname+"/statistics/tx_bytes")
	if err != nil {
		t.Fatal(err)
	}
	var v int64
	fmt.Sscan(out, &v)
	return v
}

// TestPeerTwoNodes: node B fetches a 2 GiB artifact from node
// A over tcp with 1, 2 and 4 rails; each is READY and verify --full passes.
// Then resolution on B asks the peer before anything else, and its report
// names the peer, the data plane, the rails and the bytes.
func TestPeerTwoNodes(t *testing.T) {
	harness.Peers(t)
	a, b := newNode(t, "pa"), newNode(t, "pb")
	harness.Link(t, a.ns, b.ns, "10.233.11.1/24", "10.233.11.2/24")
	id := a.seed(t, "2GiB", 8)
	const addr = "10.233.11.1:7420"
	a.serve(t, addr, b, addr)
	for _, rails := range []int{1, 2, 4} {
		b.root = filepath.Join(b.dir, fmt.Sprintf("store-%d", rails))
		rep := b.fetch(t, addr, id, "--rails", fmt.Sprint(rails))
		if !rep.Built || rep.Identity != id || rep.Rails != rails || rep.Mode != "tcp" || rep.Peer != addr || rep.Fetched != rep.Bytes || rep.Bytes < 2<<30*95/100 {
			t.Fatalf("%d rails: report %+v", rails, rep)
		}
		t.Logf("%d rails: %d bytes in %.2fs (%.2f GB/s, fsynced and verified)", rails, rep.Bytes, rep.Seconds, float64(rep.Bytes)/rep.Seconds/1e9)
		b.wsOK(t, "verify", "--full", id)
		chmodRemove(b.root)
	}

	// Resolution: the exact identity from the peer, before any other source.
	var info struct {
		Identity json.RawMessage `json:"identity"`
	}
	if err := json.Unmarshal([]byte(a.wsOK(t, "inspect", "--json", id)), &info); err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(b.dir, "identity.json")
	os.WriteFile(idFile, info.Identity, 0o644)
	b.root = filepath.Join(b.dir, "store-resolve")
	out := b.wsOK(t, "resolve", "--identity", idFile, "--peer", addr, "--mode", "required", "--report", "-")
	var rep struct {
		Outcome string `json:"outcome"`
		Source  string `json:"source"`
		Steps   []struct {
			Name     string `json:"name"`
			Transfer *struct {
				Endpoint string `json:"endpoint"`
				Mode     string `json:"mode"`
				Rails    int    `json:"rails"`
				Bytes    int64  `json:"bytes"`
			} `json:"transfer"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
		t.Fatalf("resolve report: %v\n%s", err, out)
	}
	last := rep.Steps[len(rep.Steps)-1]
	if rep.Outcome != "fetched" || rep.Source != "peer" || last.Transfer == nil || last.Transfer.Endpoint != addr ||
		last.Transfer.Mode != "tcp" || last.Transfer.Rails != peer.AutoRails() || last.Transfer.Bytes < 2<<30*95/100 {
		t.Fatalf("resolve report:\n%s", out)
	}
}

// chmodRemove removes a store (its artifacts are read-only).
func chmodRemove(root string) {
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(root)
}

// TestPeerFanOut: one seed A, children B and C fetching from
// it at once, then D, which reaches only B, fetching from a peer list that
// names all three: every node ends READY and valid, D took it from B, and
// the seed sent about one copy per direct child (interface counters).
func TestPeerFanOut(t *testing.T) {
	harness.Peers(t)
	a, b, c, d := newNode(t, "fa"), newNode(t, "fb"), newNode(t, "fc"), newNode(t, "fd")
	ab, _ := harness.Link(t, a.ns, b.ns, "10.233.21.1/24", "10.233.21.2/24")
	ac, _ := harness.Link(t, a.ns, c.ns, "10.233.22.1/24", "10.233.22.2/24")
	bd, _ := harness.Link(t, b.ns, d.ns, "10.233.23.1/24", "10.233.23.2/24")
	id := a.seed(t, "256MiB", 4)
	a.serve(t, ":7420", b, "10.233.21.1:7420", "--max-children", "2") // two direct children at once (the default is a chain)
	before := a.txBytes(t, ab) + a.txBytes(t, ac)
	w1, w2 := b.fetchAsync(t, "10.233.21.1", id), c.fetchAsync(t, "10.233.22.1", id)
	r1, r2 := w1(), w2()
	b.serve(t, ":7420", d, "10.233.23.1:7420")
	bBefore := b.txBytes(t, bd)
	// C and A are out of D's reach: the selection passes over them.
	rd := d.fetch(t, "10.233.22.2,10.233.21.1,10.233.23.1", id)
	seedSent := a.txBytes(t, ab) + a.txBytes(t, ac) - before
	bSent := b.txBytes(t, bd) - bBefore
	for _, n := range []*node{a, b, c, d} {
		n.wsOK(t, "verify", "--full", id)
	}
	copies := float64(seedSent) / float64(r1.Bytes)
	t.Logf("seed sent %d bytes = %.2f copies for 2 direct children of 3 fetching nodes; B sent %.2f copies to D",
		seedSent, copies, float64(bSent)/float64(r1.Bytes))
	if !r1.Built || !r2.Built || !rd.Built || rd.Peer != "10.233.23.1:7420" {
		t.Fatalf("reports: %+v %+v %+v", r1, r2, rd)
	}
	if copies < 1.95 || copies > 2.2 {
		t.Fatalf("the seed sent %.2f copies, want about 2 (one per direct child)", copies)
	}
	if bc := float64(bSent) / float64(rd.Bytes); bc < 0.95 || bc > 1.2 {
		t.Fatalf("B sent %.2f copies to D, want about 1", bc)
	}
}

// killWhenSent SIGKILLs p once the interface has sent more than at bytes.
func killWhenSent(t *testing.T, n *node, ifname string, at int64, p *harness.Proc) {
	t.Helper()
	start := n.txBytes(t, ifname)
	if err := testenv.WaitEvery(2*time.Minute, 20*time.Millisecond, func() error {
		if p.Exited() {
			return testenv.Final(errors.New("the fetch exited"))
		}
		if sent := n.txBytes(t, ifname) - start; sent < at {
			return fmt.Errorf("%d bytes sent", sent)
		}
		return nil
	}); err != nil {
		t.Fatalf("the transfer never reached %d bytes: %v", at, err)
	}
	syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.Done()
}

// throttle limits what a node sends on an interface, so a transfer lasts
// long enough to be killed in the middle.
func throttle(t *testing.T, n *node, ifname string) {
	t.Helper()
	if _, err := n.ns.Exec("tc", "qdisc", "add", "dev", ifname, "root", "tbf", "rate", "400mbit", "burst", "256kb", "latency", "100ms"); err != nil {
		t.Fatal(err)
	}
}

// TestPeerKilledMidTransfer: a peer killed part way: the
// fetch moves to the other peer, resumes with what it has not verified,
// and ends READY and valid; a peer restarted part way is detected by its
// generation id and the fetch resumes from it.
func TestPeerKilledMidTransfer(t *testing.T) {
	harness.Peers(t)
	const size = 256 << 20
	t.Run("failover", func(t *testing.T) {
		a1, a2, b := newNode(t, "ka"), newNode(t, "kb"), newNode(t, "kc")
		if1, _ := harness.Link(t, a1.ns, b.ns, "10.233.31.1/24", "10.233.31.2/24")
		harness.Link(t, a2.ns, b.ns, "10.233.32.1/24", "10.233.32.2/24")
		id := a1.seed(t, "256MiB", 4)
		if id2 := a2.seed(t, "256MiB", 4); id2 != id {
			t.Fatalf("two seeds of the same checkpoint differ: %s %s", id, id2)
		}
		throttle(t, a1, if1)
		p1 := a1.serve(t, "10.233.31.1:7420", b, "10.233.31.1:7420")
		a2.serve(t, "10.233.32.1:7420", b, "10.233.32.1:7420")
		wait := b.fetchAsync(t, "10.233.31.1:7420,10.233.32.1:7420", id, "--rails", "2")
		killWhenSent(t, a1, if1, size/4, p1)
		rep := wait()
		if !rep.Built || rep.Failovers < 1 || rep.Peer != "10.233.32.1:7420" || len(rep.Peers) != 2 {
			t.Fatalf("report %+v", rep)
		}
		b.wsOK(t, "verify", "--full", id)
	})
	t.Run("restart", func(t *testing.T) {
		a, b := newNode(t, "ra"), newNode(t, "rb")
		ifa, _ := harness.Link(t, a.ns, b.ns, "10.233.33.1/24", "10.233.33.2/24")
		id := a.seed(t, "256MiB", 4)
		throttle(t, a, ifa)
		const addr = "10.233.33.1:7420"
		p := a.serve(t, addr, b, addr)
		wait := b.fetchAsync(t, addr, id, "--rails", "2")
		killWhenSent(t, a, ifa, size/4, p)
		a.serve(t, addr, b, addr)
		rep := wait()
		if !rep.Built || rep.Restarts != 1 || rep.Peer != addr {
			t.Fatalf("report %+v", rep)
		}
		b.wsOK(t, "verify", "--full", id)
	})
}

// TestPeerServedByWeightsnapd: with [peer] serve, the daemon serves its
// store to other nodes; a restart of the daemon is a new generation.
func TestPeerServedByWeightsnapd(t *testing.T) {
	harness.Peers(t)
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	w := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{ExtraConfig: fmt.Sprintf("\n[peer]\nserve = true\nlisten = %q\nallow_unauthenticated = true\n", addr)})
	src := filepath.Join(w.Dir, "src")
	wsOK(t, w.Root, "dev", "synth", "--out", src, "--size", "32MiB", "--shards", "2")
	id := strings.TrimSpace(wsOK(t, w.Root, "import", src, "--revision", storetest.Revision, "--repository", "org/daemon"))
	var ls struct {
		Generation string `json:"generation"`
		Artifacts  []struct {
			IdentityDigest string `json:"identity_digest"`
		} `json:"artifacts"`
	}
	listing := func() {
		t.Helper()
		if err := json.Unmarshal([]byte(wsOK(t, t.TempDir(), "peer", "ls", "--json", addr)), &ls); err != nil {
			t.Fatal(err)
		}
	}
	listing()
	if len(ls.Artifacts) != 1 || ls.Artifacts[0].IdentityDigest != id {
		t.Fatalf("the daemon's peer lists %+v, want %s", ls, id)
	}
	root := filepath.Join(t.TempDir(), "store")
	var rep peerReport
	if err := json.Unmarshal([]byte(wsOK(t, root, "peer", "fetch", "--json", addr, id)), &rep); err != nil || !rep.Built || rep.Peer != addr {
		t.Fatalf("fetch from the daemon: %+v %v", rep, err)
	}
	wsOK(t, root, "verify", "--full", id)
	gen := ls.Generation
	w.Restart(t)
	listing()
	if ls.Generation == gen {
		t.Fatal("the restarted daemon kept its generation")
	}
}
