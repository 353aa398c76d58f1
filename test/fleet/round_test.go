package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// Round is one rollout: the first Nodes nodes, from empty stores, resolve the artifact at the same
// instant.
type Round struct {
	Nodes int
	Peers bool // each node runs peer serve and resolves with the round's other nodes as its peers; else the registry only
	// MaxChildren is peer serve's --max-children; 0 leaves its default.
	MaxChildren int
}

// Result is what a round measured.
type Result struct {
	Round
	OriginBytes int64   // the origin interface's tx bytes during the round
	Copies      float64 // OriginBytes over the artifact's bytes
	First, Last time.Duration
	Sources     map[string]int // resolve's report: the source each node's copy came from
}

// Run runs one round: it stops every peer serve, empties the round's stores, starts peer serve on
// each (with Peers), starts every node's resolve blocked on one lock, releases them together, waits
// for all (bounded), and checks `verify --full` on each. Any node failing fails the test.
func (f *Fleet) Run(r Round) Result {
	t := f.t
	t.Helper()
	f.rounds++
	for _, n := range f.nodes {
		if n.serve != nil {
			n.serve.Stop()
			n.serve = nil
		}
	}
	nodes := f.nodes[:r.Nodes]
	for i, n := range nodes {
		removeStore(n.root)
		if r.Peers {
			n.serve = f.serve(n, fmt.Sprintf("serve-%d-%d", f.rounds, i), r.MaxChildren)
		}
	}

	// The barrier: every resolve waits for a shared flock the test holds exclusively until all of
	// them wait (the kernel lists each waiter in /proc/locks); unlocking wakes them together.
	lockPath := filepath.Join(f.dir, fmt.Sprintf("barrier-%d", f.rounds))
	lock, err := os.Create(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(lock.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	procs := make([]*harness.Proc, len(nodes))
	reports := make([]string, len(nodes))
	for i, n := range nodes {
		reports[i] = filepath.Join(f.dir, fmt.Sprintf("report-%d-%d.json", f.rounds, i))
		cfg := ""
		argv := []string{"resolve", "--identity", f.identity, "--mode", "required", "--registry", f.repo, "--plain-http", "--report", reports[i]}
		if peers := f.peersOf(nodes, i); r.Peers && len(peers) > 0 {
			argv = append(argv, "--peer", strings.Join(peers, ","))
			// The node's own address, as the others list it: the nodes that
			// start together rank the same addresses and agree on one root.
			cfg = filepath.Join(f.dir, fmt.Sprintf("config-%d-%d.toml", f.rounds, i))
			if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[peer]\nadvertise = %q\n", n.addr)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		argv = append([]string{f.flock, "--shared", lockPath, f.ws, "--root", n.root, "--config", cfg}, argv...)
		procs[i] = n.ns.Start(t, f.dir, fmt.Sprintf("resolve-%d-%d", f.rounds, i), argv...)
	}
	if err := poll(time.Minute, func() error {
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("%s exited before the start: %v\n%s", p.Name, p.Err(), harness.Tail(p.Log, 20))
			}
		}
		if w := lockWaiters(st.Ino); w < len(procs) {
			return fmt.Errorf("%d of %d nodes wait at the barrier", w, len(procs))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	before := f.originTx()
	start := time.Now()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	ends := make([]time.Time, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-p.Done()
			ends[i] = time.Now()
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(f.roundTimeout(r.Nodes)):
		for _, p := range procs {
			p.Kill()
		}
		<-all
		t.Fatalf("round of %d nodes: not all READY within %v", r.Nodes, f.roundTimeout(r.Nodes))
	}
	res := Result{Round: r, Sources: map[string]int{}}
	for i, p := range procs {
		if err := p.Err(); err != nil {
			t.Fatalf("node %d: resolve: %v\n%s", i, err, harness.Tail(p.Log, 30))
		}
		d := ends[i].Sub(start)
		if res.First == 0 || d < res.First {
			res.First = d
		}
		res.Last = max(res.Last, d)
		res.Sources[reportSource(t, reports[i])]++
	}
	res.OriginBytes = f.originTx() - before
	res.Copies = float64(res.OriginBytes) / float64(f.Bytes)
	for i, n := range nodes {
		if out, err := harness.Run("", f.ws, "--root", n.root, "--config", "", "verify", "--full", f.ID); err != nil {
			t.Fatalf("node %d: verify --full: %v\n%s", i, err, out)
		}
	}
	return res
}

// serve starts peer serve on n and waits until it lists (asked from inside n's namespace).
func (f *Fleet) serve(n *node, name string, maxChildren int) *harness.Proc {
	t := f.t
	t.Helper()
	argv := []string{f.ws, "--root", n.root, "--config", "", "peer", "serve", "--listen", n.addr, "--allow-unauthenticated"}
	if maxChildren > 0 {
		argv = append(argv, "--max-children", strconv.Itoa(maxChildren))
	}
	p := n.ns.Start(t, f.dir, name, argv...)
	if err := poll(30*time.Second, func() error {
		if p.Exited() {
			return fmt.Errorf("peer serve exited: %w", p.Err())
		}
		_, err := n.ns.Exec(f.ws, "--config", "", "peer", "ls", n.addr)
		return err
	}); err != nil {
		t.Fatalf("peer serve on %s: %v\n%s", n.addr, err, harness.Tail(p.Log, 20))
	}
	return p
}

// peersOf is the peer list of node i: every other node of the round.
func (f *Fleet) peersOf(nodes []*node, i int) []string {
	var peers []string
	for j, n := range nodes {
		if j != i {
			peers = append(peers, n.addr)
		}
	}
	return peers
}

// roundTimeout bounds a round: three times the time the origin's link takes to send one copy to
// each node, plus three minutes for the start and the machine's other load.
func (f *Fleet) roundTimeout(nodes int) time.Duration {
	if f.opts.RateMbit == 0 {
		return 10 * time.Minute
	}
	wire := time.Duration(float64(nodes) * float64(f.Bytes) * 8 / (float64(f.opts.RateMbit) * 1e6) * float64(time.Second))
	return 3*wire + 3*time.Minute
}

// originTx is the bytes the origin's interface has sent.
func (f *Fleet) originTx() int64 {
	f.t.Helper()
	out, err := f.origin.Exec("cat", "/sys/class/net/"+f.originIf+"/statistics/tx_bytes")
	if err != nil {
		f.t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// lockWaiters counts the processes blocked on a flock of the file with inode ino: /proc/locks lists
// each as a "->" line naming MAJOR:MINOR:INODE.
func lockWaiters(ino uint64) int {
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	suffix := ":" + strconv.FormatUint(ino, 10)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 6 && fields[1] == "->" && strings.HasSuffix(fields[6], suffix) {
			n++
		}
	}
	return n
}

// reportSource is the source resolve's report names ("registry", "peer", ...).
func reportSource(t testing.TB, path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Outcome string `json:"outcome"`
		Source  string `json:"source"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("report %s: %v", path, errors.Join(err, errors.New(string(raw))))
	}
	return rep.Outcome + " from " + rep.Source
}
