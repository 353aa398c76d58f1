package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	// Structure is each resolving node's [peer] structure; "" leaves its default (the chain).
	Structure string
	// SlowSource is each resolving node's [peer] slow_source_seconds; 0 leaves its default.
	SlowSource int
	// Holders are the first nodes of the round that keep their stores (what an earlier round left
	// there) and only serve (with Peers): they do not resolve.
	Holders int
	// Prefetch has each node run `weightsnap prefetch sync` of one prefetch file naming the
	// artifact's tag (pin = true), as weightsnapd does with its [prefetch] dir, instead of resolve.
	Prefetch bool
	// Idle are nodes of the round (by index, past its holders) that serve empty stores with Peers and
	// that every node lists, but that do not resolve: members that want nothing, as most of a
	// cluster's nodes are.
	Idle []int
	// Absent are peer addresses (host:port) every node lists after the round's others and that
	// nothing ever serves: nodes that never started.
	Absent []string
}

// Result is what a round measured.
type Result struct {
	Round
	OriginBytes int64   // the origin interface's tx bytes during the round
	Copies      float64 // OriginBytes over the artifact's bytes
	First, Last time.Duration
	Ends        []time.Duration // each resolving node's time from the start to its end (0: lost)
	Sources     map[string]int  // resolve's report: the source each node's copy came from
	// Reports are what each resolving node's report says of its copy (zero
	// for a lost node, or a prefetch).
	Reports []NodeReport
}

// NodeReport is what one node's resolve report says of its copy: where it came from, the
// peer or registry it finished with, and the transfer's own time and the publication's.
type NodeReport struct {
	Source         string  // "<outcome> from <source>"
	Endpoint       string  // the peer's host:port, or the registry reference
	FetchSeconds   float64 // the producer's time: the transfer and its hashing
	PublishSeconds float64 // the store's publication after it
}

// Run runs one round: it launches it, waits for every node and checks that each is READY and
// verifies in full (`verify --full`). Any node failing fails the test.
func (f *Fleet) Run(r Round) Result {
	f.t.Helper()
	return f.Launch(r).Wait()
}

// Rollout is a round under way.
type Rollout struct {
	f       *Fleet
	r       Round
	Nodes   []*node         // the resolving nodes (the round's nodes but its holders and idle ones)
	index   []int           // each resolving node's index in the round
	Procs   []*harness.Proc // each resolving node's resolve
	Start   time.Time       // the common start
	reports []string
	before  int64 // the origin's tx bytes at the start
	ends    []time.Time
	all     chan struct{} // closed once every resolve ended
	// lost are the nodes a fault test ends without the artifact: killed
	// (Kill), or failing by design (Lose).
	lost map[int]bool
}

// Launch starts a round: it stops every peer serve, empties the stores of the round's nodes but its
// holders, starts peer serve on each (with Peers), starts every resolving node's resolve blocked on
// one lock and releases them together.
func (f *Fleet) Launch(r Round) *Rollout {
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
		if i >= r.Holders {
			removeStore(n.root)
		}
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
	ro := &Rollout{f: f, r: r, lost: map[int]bool{}}
	prefetchDir := filepath.Join(f.dir, fmt.Sprintf("prefetch-%d", f.rounds))
	if r.Prefetch {
		if err := os.MkdirAll(prefetchDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(prefetchDir, "models.toml"), []byte(fmt.Sprintf("[[artifact]]\nref = %q\npin = true\n", f.repo+":v1")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range nodes {
		if i < r.Holders || slices.Contains(r.Idle, i) {
			continue
		}
		ro.Nodes, ro.index = append(ro.Nodes, n), append(ro.index, i)
		report := filepath.Join(f.dir, fmt.Sprintf("report-%d-%d.json", f.rounds, i))
		cfg := ""
		argv := []string{"resolve", "--identity", f.identity, "--mode", "required", "--registry", f.repo, "--plain-http", "--report", report}
		if peers := append(f.peersOf(nodes, i), r.Absent...); r.Peers && len(peers) > 0 {
			argv = append(argv, "--peer", strings.Join(peers, ","))
			// The node's own address, as the others list it: the nodes that
			// start together rank the same addresses and agree on one root.
			cfg = filepath.Join(f.dir, fmt.Sprintf("config-%d-%d.toml", f.rounds, i))
			conf := fmt.Sprintf("[peer]\nadvertise = %q\n", n.addr)
			if r.Structure != "" {
				conf += fmt.Sprintf("structure = %q\n", r.Structure)
			}
			if r.SlowSource > 0 {
				conf += fmt.Sprintf("slow_source_seconds = %d\n", r.SlowSource)
			}
			if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if r.Prefetch {
			// The peers come from the configuration, as weightsnapd's do.
			cfg = filepath.Join(f.dir, fmt.Sprintf("config-%d-%d.toml", f.rounds, i))
			host, _, _ := strings.Cut(f.repo, "/")
			conf := fmt.Sprintf("[resolve]\nregistries = [%q]\nplain_http = true\n", host)
			if peers := f.peersOf(nodes, i); r.Peers && len(peers) > 0 {
				quoted := make([]string, len(peers))
				for j, p := range peers {
					quoted[j] = strconv.Quote(p)
				}
				conf += fmt.Sprintf("\n[peer]\nadvertise = %q\npeers = [%s]\n", n.addr, strings.Join(quoted, ", "))
			}
			if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			argv = []string{"prefetch", "sync", prefetchDir}
		}
		argv = append([]string{f.flock, "--shared", lockPath, f.ws, "--root", n.root, "--config", cfg}, argv...)
		ro.reports = append(ro.reports, report)
		ro.Procs = append(ro.Procs, n.ns.Start(t, f.dir, fmt.Sprintf("resolve-%d-%d", f.rounds, i), argv...))
	}
	if err := poll(time.Minute, func() error {
		for _, p := range ro.Procs {
			if p.Exited() {
				return fmt.Errorf("%s exited before the start: %v\n%s", p.Name, p.Err(), harness.Tail(p.Log, 20))
			}
		}
		if w := lockWaiters(st.Ino); w < len(ro.Procs) {
			return fmt.Errorf("%d of %d nodes wait at the barrier", w, len(ro.Procs))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	ro.before = f.originTx()
	ro.Start = time.Now()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	ro.ends = make([]time.Time, len(ro.Procs))
	var wg sync.WaitGroup
	for i, p := range ro.Procs {
		wg.Go(func() {
			<-p.Done()
			ro.ends[i] = time.Now()
		})
	}
	ro.all = make(chan struct{})
	go func() { wg.Wait(); close(ro.all) }()
	return ro
}

// Kill crashes the i-th resolving node: its resolve and its peer serve, with SIGKILL, and loses it
// (Lose).
func (ro *Rollout) Kill(i int) {
	ro.Lose(i)
	ro.Procs[i].Kill()
	if s := ro.Nodes[i].serve; s != nil {
		s.Kill()
		ro.Nodes[i].serve = nil
	}
}

// Lose says the i-th resolving node is expected to end without the artifact: Wait checks neither its
// resolve's status (the test does) nor its READY, only that it published nothing unverified.
func (ro *Rollout) Lose(i int) { ro.lost[i] = true }

// OriginTx is the bytes the origin's interface has sent since the start.
func (ro *Rollout) OriginTx() int64 { return ro.f.originTx() - ro.before }

// Wait waits for every resolve (bounded by the round's timeout) and checks each node: READY and
// verifying in full, or, for a lost node, no unverifiable artifact published.
func (ro *Rollout) Wait() Result {
	f, t, r := ro.f, ro.f.t, ro.r
	t.Helper()
	select {
	case <-ro.all:
	case <-time.After(f.roundTimeout(r.Nodes)):
		for _, p := range ro.Procs {
			p.Kill()
		}
		<-ro.all
		t.Fatalf("round of %d nodes: not all READY within %v", r.Nodes, f.roundTimeout(r.Nodes))
	}
	res := Result{Round: r, Sources: map[string]int{}, Ends: make([]time.Duration, len(ro.Procs)), Reports: make([]NodeReport, len(ro.Procs))}
	for i, p := range ro.Procs {
		if ro.lost[i] {
			continue
		}
		if err := p.Err(); err != nil {
			t.Fatalf("node %d: resolve: %v\n%s", ro.index[i], err, harness.Tail(p.Log, 30))
		}
		d := ro.ends[i].Sub(ro.Start)
		res.Ends[i] = d
		if res.First == 0 || d < res.First {
			res.First = d
		}
		res.Last = max(res.Last, d)
		if !r.Prefetch {
			res.Reports[i] = readReport(t, ro.reports[i])
			res.Sources[res.Reports[i].Source]++
		}
	}
	res.OriginBytes = ro.OriginTx()
	res.Copies = float64(res.OriginBytes) / float64(f.Bytes)
	for i, n := range ro.Nodes {
		out, err := harness.Run("", f.ws, "--root", n.root, "--config", "", "verify", "--full", f.ID)
		if err == nil {
			continue
		}
		if !ro.lost[i] {
			t.Fatalf("node %d: verify --full: %v\n%s", ro.index[i], err, out)
		}
		if _, ierr := harness.Run("", f.ws, "--root", n.root, "--config", "", "inspect", f.ID); ierr == nil {
			t.Fatalf("lost node %d: its artifact is published and fails verify --full: %v\n%s", ro.index[i], err, out)
		}
	}
	return res
}

// serve starts peer serve on n and waits until it lists (asked from inside n's namespace).
func (f *Fleet) serve(n *node, name string, maxChildren int) *harness.Proc {
	t := f.t
	t.Helper()
	argv := append(append([]string{}, n.serveCmd...), "--root", n.root, "--config", "", "peer", "serve", "--listen", n.addr, "--allow-unauthenticated")
	if n.serveCmd == nil {
		argv = append([]string{f.ws}, argv...)
	}
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
func (f *Fleet) originTx() int64 { return f.tx(f.origin, f.originIf) }

// tx is the bytes the interface dev in ns has sent.
func (f *Fleet) tx(ns *harness.NS, dev string) int64 {
	f.t.Helper()
	out, err := ns.Exec("cat", "/sys/class/net/"+dev+"/statistics/tx_bytes")
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

// readReport reads resolve's report: the source it names ("registry", "peer", ...) and the
// transfer of its last step that moved the artifact.
func readReport(t testing.TB, path string) NodeReport {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Outcome string `json:"outcome"`
		Source  string `json:"source"`
		Steps   []struct {
			Transfer *struct {
				Endpoint       string  `json:"endpoint"`
				FetchSeconds   float64 `json:"fetch_seconds"`
				PublishSeconds float64 `json:"publish_seconds"`
			} `json:"transfer"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("report %s: %v", path, errors.Join(err, errors.New(string(raw))))
	}
	nr := NodeReport{Source: rep.Outcome + " from " + rep.Source}
	for _, s := range rep.Steps {
		if tr := s.Transfer; tr != nil {
			nr.Endpoint, nr.FetchSeconds, nr.PublishSeconds = tr.Endpoint, tr.FetchSeconds, tr.PublishSeconds
		}
	}
	return nr
}
