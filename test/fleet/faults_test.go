package fleet

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// Faults of chain seeding, each on a small fleet (64 MiB, the 400 Mbit/s
// links of TestFleet): the root killed mid-pull, a node in the middle of the chain killed, a builder
// serving one unit with wrong bytes, and the root's disk full mid-build. Every node but the one the
// fault takes ends READY and verifies in full, and that one publishes nothing unverified (Wait).

// faultMaxCopies bounds the origin's egress when the root is lost mid-pull: what it had received,
// and one more copy to whichever node takes the origin after it.
const faultMaxCopies = 2.0

// listing is what `peer ls --json` says of the fleet's artifact.
type listing struct {
	MaxChildren int
	Building    bool
	Verified    int64
	Children    int
	Listed      bool // the peer holds or builds it
}

// list asks n's peer serve, from inside n's namespace, what it holds of the fleet's artifact.
func (f *Fleet) list(n *node) (listing, error) {
	out, err := n.ns.Exec(f.ws, "--config", "", "peer", "ls", "--json", "--timeout", "2", n.addr)
	if err != nil {
		return listing{}, err
	}
	var ls struct {
		MaxChildren int `json:"max_children"`
		Artifacts   []struct {
			ID       string `json:"identity_digest"`
			Building bool   `json:"building"`
			Verified int64  `json:"verified_bytes"`
			Children int    `json:"children"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		return listing{}, fmt.Errorf("peer ls --json: %w: %s", err, out)
	}
	l := listing{MaxChildren: ls.MaxChildren}
	for _, a := range ls.Artifacts {
		if a.ID == f.ID {
			l.Building, l.Verified, l.Children, l.Listed = a.Building, a.Verified, a.Children, true
		}
	}
	return l, nil
}

// rootOf is the index, in nodes, of the node that goes to the registry for the fleet's artifact
// when a round of those nodes starts from empty stores: the top of the rendezvous ranking
// (ranking).
func (f *Fleet) rootOf(nodes []*node) int { return f.ranking(nodes)[0] }

// ranking is the indexes, in nodes, in the rendezvous ranking peer computes for the fleet's
// artifact (peer/stripes): SHA-256 of the identity, a zero byte and the address, the highest first.
// The test computes it independently: a change of peer's ranking shows here as a root not found.
func (f *Fleet) ranking(nodes []*node) []int {
	score := func(addr string) uint64 {
		h := sha256.Sum256([]byte(f.ID + "\x00" + addr))
		return binary.BigEndian.Uint64(h[:])
	}
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(score(nodes[b].addr), score(nodes[a].addr)) })
	return order
}

// TestFleetMiddleKilled: five nodes start together with max_children 1, so the copy
// runs down a chain (root, then one child each); a node that is not the root, builds, and serves a
// child is killed once it has verified a quarter of the artifact. Its child, and every other node,
// finishes from others and verifies in full.
func TestFleetMiddleKilled(t *testing.T) {
	const nodes = 5
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	ro := f.Launch(Round{Nodes: nodes, Peers: true, MaxChildren: 1})
	root := f.rootOf(ro.Nodes)
	middle := -1
	if err := poll(time.Minute, func() error {
		for i, n := range ro.Nodes {
			if i == root || ro.Procs[i].Exited() {
				continue
			}
			if l, err := f.list(n); err == nil && l.Building && l.Children > 0 && l.Verified >= f.Bytes/4 {
				middle = i
				return nil
			}
		}
		return fmt.Errorf("no node but the root builds with a child and a quarter verified")
	}); err != nil {
		t.Fatal(err)
	}
	ro.Kill(middle)
	r := ro.Wait()
	t.Logf("middle node %d (root %d) killed; the origin sent %.2f copies; last READY %.2fs; sources %v",
		middle, root, r.Copies, r.Last.Seconds(), r.Sources)
	if r.Copies > faultMaxCopies {
		t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, faultMaxCopies)
	}
}

// TestFleetRootKilled: five nodes start together; the root (the rendezvous top) is
// killed, its resolve and its peer serve, once the origin has sent a third of a copy. The four
// others finish, every one verifies in full, the killed node published nothing that does not, and
// the origin sends at most faultMaxCopies copies.
func TestFleetRootKilled(t *testing.T) {
	const nodes = 5
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	ro := f.Launch(Round{Nodes: nodes, Peers: true})
	root := f.rootOf(ro.Nodes)
	if err := poll(time.Minute, func() error {
		if ro.Procs[root].Exited() {
			return nil // too late: the check below says so
		}
		if sent := ro.OriginTx(); sent < f.Bytes/3 {
			return fmt.Errorf("the origin sent %d of %d bytes", sent, f.Bytes/3)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ro.Procs[root].Exited() {
		t.Fatalf("the root (node %d) ended before the origin sent a third of a copy: %v\n%s", root, ro.Procs[root].Err(), harness.Tail(ro.Procs[root].Log, 20))
	}
	at := ro.OriginTx()
	ro.Kill(root)
	r := ro.Wait()
	t.Logf("root node %d killed with %d bytes sent by the origin (%.2f copies); in all the origin sent %.2f copies; last READY %.2fs; sources %v",
		root, at, float64(at)/float64(f.Bytes), r.Copies, r.Last.Seconds(), r.Sources)
	if r.Copies > faultMaxCopies {
		t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, faultMaxCopies)
	}
}

// corruptUnit is the unit a faulty peer serve sends with one byte flipped: its eighth range (past
// the small files and headers the first ranges often are, most likely a tensor).
const corruptUnit = "corrupt-unit@8"

// TestFleetCorruptUnit: three nodes start together with max_children 1, so the copy
// runs down a chain: the root, a middle node, a leaf. The two that are not the root serve with a
// weightsnap built with the faults tag and WEIGHTSNAP_PEER_FAULT=corruptUnit, so the one of them
// that has a child (the middle) sends that unit with one byte flipped. The child refuses the unit
// (BLAKE3 mismatch), its log naming the faulty peer's address, takes what it lacks from the root
// (the origin sends at most maxCopies), and every node is READY and verifies in full (nothing
// unverified published anywhere).
func TestFleetCorruptUnit(t *testing.T) {
	const nodes = 3
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: testRateMbit})
	faulty := []string{"env", "WEIGHTSNAP_PEER_FAULT=" + corruptUnit, faultsBinary(t)}
	root := f.rootOf(f.nodes[:nodes])
	for i, n := range f.nodes[:nodes] {
		if i != root {
			n.serveCmd = faulty
		}
	}
	ro := f.Launch(Round{Nodes: nodes, Peers: true, MaxChildren: 1})
	r := ro.Wait()
	bad := -1
	for i, n := range ro.Nodes {
		if n.serve != nil && logLine(t, n.serve.Log, "fault injected") != "" {
			bad = i
		}
	}
	if bad < 0 {
		t.Fatalf("no node sent a corrupt unit (root %d; sources %v): no builder had a child", root, r.Sources)
	}
	child, refusal := -1, ""
	for i, p := range ro.Procs {
		if l := logLine(t, p.Log, "peer "+ro.Nodes[bad].addr+": ", "BLAKE3"); l != "" {
			child, refusal = i, l
		}
	}
	t.Logf("node %d (root %d) sent a corrupt unit; node %d refused it and finished; the origin sent %.2f copies; last READY %.2fs; sources %v; the refusal: %s",
		bad, root, child, r.Copies, r.Last.Seconds(), r.Sources, refusal)
	if child < 0 {
		t.Fatalf("node %d sent a corrupt unit, and no node's log names %s with a BLAKE3 mismatch", bad, ro.Nodes[bad].addr)
	}
	if r.Copies > maxCopies {
		t.Fatalf("the origin sent %.2f copies, more than %.2f: the child took the origin, not the root", r.Copies, maxCopies)
	}
}

// TestFleetDiskFull: four nodes start together on an artifact of four files; the
// root's store is a tmpfs of five eighths of the artifact, so its pull is refused before any
// payload byte (the store reserves the manifest's size first, and nothing it could evict frees
// enough). Its resolve fails saying so (a capacity failure, exit status 5, "no space" and the size
// it needs in its message) having served no child; the others elect among themselves or go to the
// origin, every other node is READY and verifies in full, the root published nothing, and the
// origin sends at most faultMaxCopies copies.
func TestFleetDiskFull(t *testing.T) {
	const nodes = 4
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 4, RateMbit: testRateMbit})
	root := f.rootOf(f.nodes[:nodes])
	size := f.Bytes * 5 / 8
	f.StoreSize(root, size)
	ro := f.Launch(Round{Nodes: nodes, Peers: true})
	ro.Lose(root)
	r := ro.Wait()
	err := ro.Procs[root].Err()
	var fail struct {
		Outcome string `json:"outcome"`
		Failure struct {
			Kind    string `json:"kind"`
			Message string `json:"message"`
		} `json:"failure"`
	}
	if raw, rerr := os.ReadFile(ro.reports[root]); rerr == nil {
		_ = json.Unmarshal(raw, &fail)
	}
	t.Logf("root node %d on a %d MiB store: resolve %v (%s: %s); the origin sent %.2f copies; last READY %.2fs; sources %v",
		root, size>>20, err, fail.Failure.Kind, fail.Failure.Message, r.Copies, r.Last.Seconds(), r.Sources)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 5 {
		t.Fatalf("the root's resolve: %v, want exit status 5 (out of space)\n%s", err, harness.Tail(ro.Procs[root].Log, 20))
	}
	if line := logLine(t, ro.Nodes[root].serve.Log, "peer: session started"); line != "" {
		t.Fatalf("the root (node %d) served a child although its store refused the artifact before any byte: %s", root, line)
	}
	if fail.Failure.Kind != "capacity" || !strings.Contains(fail.Failure.Message, "no space") || !strings.Contains(fail.Failure.Message, "needs") {
		t.Fatalf("the root's report: failure %q %q, want a capacity failure saying no space\n%s", fail.Failure.Kind, fail.Failure.Message, harness.Tail(ro.Procs[root].Log, 20))
	}
	if r.Copies > faultMaxCopies {
		t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, faultMaxCopies)
	}
}

// faultsBinary builds weightsnap with the faults build tag (its peer server's WEIGHTSNAP_PEER_FAULT)
// into a directory the test removes.
func faultsBinary(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(harness.TempDir(t), "weightsnap")
	cmd := exec.Command("go", "build", "-tags", "faults", "-o", bin, "./cmd/weightsnap")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build weightsnap with the faults tag: %v\n%s", err, out)
	}
	return bin
}

// logLine is the first line of the log file at path that holds every one of subs, "" if none.
func logLine(t *testing.T, path string, subs ...string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
