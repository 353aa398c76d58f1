//go:build bench

package fleet

// The fleet benchmark, run by scripts/bench-fleet.sh (make bench), never by make test:
//
//	go test -tags bench -count=1 -timeout 120m -v -run '^TestFleetBench$' ./test/fleet/
//
// Env: BENCH_FLEET_STRUCTURE (the fleet rounds' [peer] structure: chain, the default, or forest;
// the forest's rounds take forestSize, forestRateMbit, no registry-only rounds and the kill round
// unless set otherwise), BENCH_FLEET_NODES (default "2 4 8 16"), BENCH_FLEET_SIZE (default 256MiB),
// BENCH_FLEET_RATE_MBIT (default benchRateMbit), BENCH_FLEET_ORIGIN_RATE_MBIT (the origin's link
// alone, one node alone's rounds included; default the other links' rate), BENCH_FLEET_JSON (also
// write each fleet row's median round, sim.Measured, to this file: test/fleet/sim's calibration
// reads it), BENCH_FLEET_REGISTRY (0 leaves out the registry-only rounds, 1 keeps them),
// BENCH_FLEET_KILL (1 adds, at the largest count, a fleet round with one node killed
// mid-transfer), BENCH_REPS (the rounds of one node alone and of every row up to
// BENCH_FLEET_REPS_NODES nodes, default benchrow.MinReps), BENCH_FLEET_REPS_NODES (default
// repsNodes, the forest's forestRepsNodes; larger rows take one round), BENCH_FLEET_GOMAXPROCS (the
// nodes' GOMAXPROCS: default unset, the forest's forestGOMAXPROCS).

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/benchrow"
	"github.com/weightsnap/weightsnap/test/fleet/sim"
)

// benchRateMbit is every link's rate in the chain's rounds. One node alone, unshaped, resolves 256
// MiB from the registry on this 2-core virtual machine at about 3 Gbit/s (0.72 s, measured with the
// machine shared, load average about 7; the bench's first line measures it again every run):
// hashing and copying, not the veth, bound it. With chain seeding, 16 nodes each receive at the
// link's rate at once, so the machine must take in 16 links' worth at the same time: 100 Mbit/s
// (12.5 MB/s, about 22 s for one copy of 256 MiB) times 16 is 1.6 Gbit/s, about half of one node's
// unshaped rate, so the links, not the CPUs or a disk (stores and registry are on tmpfs), bound
// every row. A faster rate would let 16 nodes outrun the CPUs; a slower one only makes the run
// longer (about 25 minutes at 100 Mbit/s today, when every node still pulls from the origin).
const benchRateMbit = 100

// The forest's rounds. A member waits for a piece at every level of its stripe's tree, so the last
// node trails one node alone by about the tree's depth times the stripes times a piece's time on a
// link: over one node alone that lag is the depth times the stripes in pieces over the artifact's
// pieces, whatever the rate. forestSize makes it small against the 1.3x goal at 64 nodes, and 64
// stores of it fit in the machine's memory with room. forestRateMbit keeps all 64 links' worth of
// receiving, hashing and relaying well below what the 2 cores move (the table's CPU column says
// how far): at a faster rate the CPUs, not the links, set the 64-node row. A round then takes
// minutes, so the forest's rows take one round each (forestRepsNodes) and the run of 2 to 64
// nodes and the kill round about half an hour; BENCH_FLEET_REPS_NODES asks for more. Each node's Go
// runtime gets one processor (GOMAXPROCS): the nodes stand for machines of their own, and 64
// runtimes of two processors each on the 2 cores spend the CPUs on their schedulers' spinning.
const (
	forestSize       = "192MiB"
	forestRateMbit   = 10
	forestRepsNodes  = 0
	forestGOMAXPROCS = "1"
)

// repsNodes is the largest row of the chain that takes BENCH_REPS rounds, one node alone included;
// larger rows take one round each, which their rounds column says: the run stays within its time.
const repsNodes = 4

func TestFleetBench(t *testing.T) {
	structure := os.Getenv("BENCH_FLEET_STRUCTURE")
	forest := structure == "forest"
	counts := []int{2, 4, 8, 16}
	if s := os.Getenv("BENCH_FLEET_NODES"); s != "" {
		counts = nil
		for _, f := range strings.Fields(s) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				t.Fatalf("BENCH_FLEET_NODES=%q", s)
			}
			counts = append(counts, n)
		}
	}
	size := envOr("BENCH_FLEET_SIZE", "256MiB", forestSize, forest)
	rate, err := strconv.Atoi(envOr("BENCH_FLEET_RATE_MBIT", strconv.Itoa(benchRateMbit), strconv.Itoa(forestRateMbit), forest))
	if err != nil {
		t.Fatalf("BENCH_FLEET_RATE_MBIT: %v", err)
	}
	origin, err := strconv.Atoi(envOr("BENCH_FLEET_ORIGIN_RATE_MBIT", strconv.Itoa(rate), strconv.Itoa(rate), forest))
	if err != nil || origin <= 0 {
		t.Fatalf("BENCH_FLEET_ORIGIN_RATE_MBIT: %v", err)
	}
	registryOnly := envOr("BENCH_FLEET_REGISTRY", "1", "0", forest) != "0"
	kill := envOr("BENCH_FLEET_KILL", "0", "1", forest) == "1"
	repsUpTo, err := strconv.Atoi(envOr("BENCH_FLEET_REPS_NODES", strconv.Itoa(repsNodes), strconv.Itoa(forestRepsNodes), forest))
	if err != nil {
		t.Fatalf("BENCH_FLEET_REPS_NODES: %v", err)
	}
	// reps is the rounds of a row of n nodes.
	reps := func(n int) int {
		if n > repsUpTo {
			return 1
		}
		return benchrow.Reps()
	}
	if procs := envOr("BENCH_FLEET_GOMAXPROCS", "", forestGOMAXPROCS, forest); procs != "" {
		t.Setenv("GOMAXPROCS", procs) // the nodes' processes inherit it
	}
	most := 1
	for _, n := range counts {
		most = max(most, n)
	}
	if structure == "" {
		structure = "chain"
	}
	f := Start(t, Options{Nodes: most, Size: size, Shards: 4, Congestion: os.Getenv("BENCH_FLEET_CC")})
	unshaped := f.benchRound(Round{Nodes: 1})
	f.Shape(rate)
	if origin != rate {
		f.ShapeOrigin(origin)
	}
	alone := f.benchRows(Round{Nodes: 1}, reps(1))
	type row struct{ fleet, registry benchResults }
	var rows []row
	for _, n := range counts {
		r := row{fleet: f.benchRows(Round{Nodes: n, Peers: true, Structure: structure}, reps(n))}
		if registryOnly {
			r.registry = f.benchRows(Round{Nodes: n}, reps(n))
		}
		rows = append(rows, r)
		t.Logf("%d nodes done", n)
	}
	var killed benchResults
	if kill {
		killed = benchResults{f.killedRound(t, Round{Nodes: most, Peers: true, Structure: structure})}
	}

	load, _ := os.ReadFile("/proc/loadavg") // the machine may be shared: say how busy it was
	loadAvg := strings.Join(strings.Fields(string(load))[:3], " ")
	aloneLast := alone.last()
	procs := os.Getenv("GOMAXPROCS")
	if procs == "" {
		procs = "unset"
	}
	links := fmt.Sprintf("every link %d Mbit/s both ways (tbf)", rate)
	if origin != rate {
		links = fmt.Sprintf("every node's link %d Mbit/s, the origin's %d Mbit/s, both ways (tbf)", rate, origin)
	}
	fmt.Printf("\nweightsnap fleet benchmark: %s (%d bytes), tcp (%s), structure %s, %s, %d cores, GOMAXPROCS %s, load average at the end %s\n",
		size, f.Bytes, f.opts.Congestion, structure, links, runtime.NumCPU(), procs, loadAvg)
	fmt.Printf("one node alone, unshaped: %.2fs (%.0f Mbit/s, %.3f CPU-s/MiB); on the shaped links: %s s, %s CPU-s/MiB (rounds: %d)\n",
		unshaped.Last.Seconds(), mbits(f.Bytes, unshaped.Last.Seconds()), unshaped.cpuPerMiB(f.Bytes),
		aloneLast.Format(2), alone.cpuPerMiB(f.Bytes).Format(3), len(alone))
	// The nodes' receiving at once, against what the CPUs moved for one node alone unshaped.
	if need, can := float64(most*rate), mbits(f.Bytes, unshaped.Last.Seconds()); need > can/1.5 {
		fmt.Printf("warning: %d nodes at %d Mbit/s each is %.0f Mbit/s, not well below one node's unshaped %.0f Mbit/s: the CPUs may bound the largest rows\n",
			most, rate, need, can)
	}
	printTable := func(title string, pick func(row) benchResults) {
		fmt.Printf("\n%s\n", title)
		fmt.Printf("%5s %6s | %6s | %-20s | %-20s | %-20s | %-24s | %9s | %-20s\n",
			"nodes", "rounds", "copies", "p50 s", "p99 s", "last s", "last / alone", "origin MB", "CPU-s per node per MiB")
		for _, r := range rows {
			fmt.Println(pick(r).cells(f.Bytes, aloneLast))
		}
	}
	printTable("fleet: resolve with the other nodes as peers", func(r row) benchResults { return r.fleet })
	if killed != nil {
		fmt.Printf("%s  one node killed mid-transfer; the others' times\n", killed.cells(f.Bytes, aloneLast))
	}
	if registryOnly {
		printTable("registry only", func(r row) benchResults { return r.registry })
	}
	fmt.Printf("\nEach figure is the median [min-max] of the row's rounds (the rounds column; one round gives the same figure thrice); copies and origin MB are the rows' most.\n")
	fmt.Println("copies: the origin interface's tx bytes over the artifact's; p50/p99: of the nodes' times from the common start to READY (nearest rank: of 16, the 8th and the 16th);")
	fmt.Println("last: the last READY (the max); last / alone: the medians' ratio [the range the rounds allow];")
	fmt.Println("CPU: the user and system seconds of every node's resolve and peer serve in the round (not the registry's) over the nodes and the artifact's MiB")
	for _, r := range rows {
		fmt.Printf("sources at %d nodes (median round): fleet %v", r.fleet.median().Nodes, r.fleet.median().Sources)
		if registryOnly {
			fmt.Printf(", registry only %v", r.registry.median().Sources)
		}
		fmt.Println()
	}
	if path := os.Getenv("BENCH_FLEET_JSON"); path != "" {
		m := sim.Measured{Command: benchCommand(counts, size, rate, origin, structure, f.opts.Congestion), Size: size, Bytes: f.Bytes, Shards: 4, RateMbit: rate, Cores: runtime.NumCPU(),
			Load: loadAvg, UnshapedS: unshaped.Last.Seconds(), AloneS: aloneLast.Median(), Structure: structure, Congestion: f.opts.Congestion}
		for _, r := range rows {
			m.Rounds = append(m.Rounds, f.measured(r.fleet.median().Result))
		}
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// envOr is the environment variable key, or else the structure's default: forest's in the forest,
// chain's otherwise.
func envOr(key, chain, forest string, isForest bool) string {
	if s := os.Getenv(key); s != "" {
		return s
	}
	if isForest {
		return forest
	}
	return chain
}

// benchResult is a round's Result and the CPU its nodes spent.
type benchResult struct {
	Result
	CPU time.Duration // user and system time of the round's resolves and peer serves
}

// benchResults are the rounds of one row.
type benchResults []benchResult

// benchRound runs r as Run does and adds the CPU time of its nodes: each resolve's, and each peer
// serve's, stopped once the round is over.
func (f *Fleet) benchRound(r Round) benchResult {
	return f.finish(f.Launch(r))
}

// benchRows runs r reps times.
func (f *Fleet) benchRows(r Round, reps int) benchResults {
	out := make(benchResults, 0, reps)
	for range reps {
		out = append(out, f.benchRound(r))
	}
	return out
}

// finish waits for ro (Wait), stops its nodes' peer serves and sums its processes' CPU time.
func (f *Fleet) finish(ro *Rollout) benchResult {
	res := benchResult{Result: ro.Wait()}
	for _, p := range ro.Procs {
		if ps := p.Cmd.ProcessState; ps != nil {
			res.CPU += ps.UserTime() + ps.SystemTime()
		}
	}
	for _, n := range f.nodes[:ro.r.Nodes] {
		if n.serve == nil {
			continue
		}
		n.serve.Stop()
		if ps := n.serve.Cmd.ProcessState; ps != nil {
			res.CPU += ps.UserTime() + ps.SystemTime()
		}
		n.serve = nil
	}
	return res
}

// cpuPerMiB is the round's CPU seconds per node per MiB of the artifact.
func (r benchResult) cpuPerMiB(bytes int64) float64 {
	return r.CPU.Seconds() / float64(r.Nodes) / (float64(bytes) / (1 << 20))
}

// runs is one figure of every round of the row.
func (rs benchResults) runs(fig func(benchResult) float64) benchrow.Runs {
	out := make(benchrow.Runs, len(rs))
	for i, r := range rs {
		out[i] = fig(r)
	}
	return out
}

// last is the rounds' last READY, in seconds.
func (rs benchResults) last() benchrow.Runs {
	return rs.runs(func(r benchResult) float64 { return r.Last.Seconds() })
}

// cpuPerMiB is the rounds' CPU seconds per node per MiB.
func (rs benchResults) cpuPerMiB(bytes int64) benchrow.Runs {
	return rs.runs(func(r benchResult) float64 { return r.cpuPerMiB(bytes) })
}

// median is the round whose last READY is the median's (of an even count, the lower middle one).
func (rs benchResults) median() benchResult {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b benchResult) int { return int(a.Last - b.Last) })
	return s[(len(s)-1)/2]
}

// cells are a row of the table: its nodes and rounds, the most copies, the p50, p99 and last of the
// nodes' times to READY, the last over one node alone, the most origin egress and the CPU per node
// per MiB.
func (rs benchResults) cells(bytes int64, alone benchrow.Runs) string {
	quantile := func(q float64) func(benchResult) float64 {
		return func(r benchResult) float64 {
			var ends []float64
			for _, d := range r.Ends {
				if d > 0 { // a lost node has none
					ends = append(ends, d.Seconds())
				}
			}
			return sim.Quantile(ends, q)
		}
	}
	copies := rs.runs(func(r benchResult) float64 { return r.Copies })
	origin := rs.runs(func(r benchResult) float64 { return float64(r.OriginBytes) / 1e6 })
	return fmt.Sprintf("%5d %6d | %6.2f | %-20s | %-20s | %-20s | %-24s | %9.0f | %-20s", rs[0].Nodes, len(rs), copies.Max(),
		rs.runs(quantile(0.5)).Format(2), rs.runs(quantile(0.99)).Format(2), rs.last().Format(2),
		benchrow.Ratio(rs.last(), alone), origin.Max(), rs.cpuPerMiB(bytes).Format(3))
}

// killedRound runs r with one node killed mid-transfer: the second of the rendezvous ranking (in
// the forest, the head of the first stripe), once it has verified a quarter of the artifact.
func (f *Fleet) killedRound(t *testing.T, r Round) benchResult {
	ro := f.Launch(r)
	victim := f.forestHead(t, ro.Nodes)
	if err := poll(10*time.Minute, func() error {
		if l, err := f.list(ro.Nodes[victim]); err == nil && l.Building && l.Verified >= f.Bytes/4 {
			return nil
		}
		return fmt.Errorf("node %d has not verified a quarter", victim)
	}); err != nil {
		t.Fatal(err)
	}
	ro.Kill(victim)
	return f.finish(ro)
}

// measured is a fleet round as sim.Measured keeps it: each node's time to READY and the node
// (index in the round) or registry (-1) its copy came from.
func (f *Fleet) measured(r Result) sim.MeasuredRound {
	mr := sim.MeasuredRound{Nodes: r.Nodes, Copies: r.Copies}
	for i, d := range r.Ends {
		rep := r.Reports[i]
		parent := slices.IndexFunc(f.nodes[:r.Nodes], func(n *node) bool { return n.addr == rep.Endpoint })
		mr.Each = append(mr.Each, sim.MeasuredNode{ReadyS: d.Seconds(), Parent: parent, FetchS: rep.FetchSeconds, PublishS: rep.PublishSeconds})
	}
	return mr
}

// benchCommand is the command line that runs this benchmark with these settings.
func benchCommand(counts []int, size string, rate, origin int, structure, congestion string) string {
	ns := make([]string, len(counts))
	for i, n := range counts {
		ns[i] = strconv.Itoa(n)
	}
	env := fmt.Sprintf("BENCH_FLEET_STRUCTURE=%s BENCH_FLEET_SIZE=%s BENCH_FLEET_RATE_MBIT=%d", structure, size, rate)
	if origin != rate {
		env += fmt.Sprintf(" BENCH_FLEET_ORIGIN_RATE_MBIT=%d", origin)
	}
	if congestion != defaultCongestion {
		env += " BENCH_FLEET_CC=" + congestion
	}
	return env + " BENCH_FLEET_JSON=FILE scripts/bench-fleet.sh " + strings.Join(ns, " ")
}

// mbits is the rate of moving bytes in seconds.
func mbits(bytes int64, seconds float64) float64 { return float64(bytes) * 8 / seconds / 1e6 }

// TestFleetMaxChildren (tag bench) rolls the artifact out to BENCH_FLEET_NODES' largest count (16)
// once for each of peer serve's --max-children in BENCH_FLEET_MAX_CHILDREN (default "1 2 4"): how
// [peer] max_children's default was chosen.
func TestFleetMaxChildren(t *testing.T) {
	nodes := 16
	if s := os.Getenv("BENCH_FLEET_NODES"); s != "" {
		f := strings.Fields(s)
		var err error
		if nodes, err = strconv.Atoi(f[len(f)-1]); err != nil || nodes < 2 {
			t.Fatalf("BENCH_FLEET_NODES=%q", s)
		}
	}
	values := "1 2 4"
	if s := os.Getenv("BENCH_FLEET_MAX_CHILDREN"); s != "" {
		values = s
	}
	f := Start(t, Options{Nodes: nodes, Size: "256MiB", Shards: 4})
	f.Shape(benchRateMbit)
	alone := f.Run(Round{Nodes: 1})
	fmt.Printf("\nmax_children at %d nodes, 256 MiB, %d Mbit/s links; one node alone %.2fs\n", nodes, benchRateMbit, alone.Last.Seconds())
	fmt.Printf("%12s %7s %8s %8s %8s\n", "max_children", "copies", "first s", "last s", "/alone")
	for _, v := range strings.Fields(values) {
		mc, err := strconv.Atoi(v)
		if err != nil || mc < 1 {
			t.Fatalf("BENCH_FLEET_MAX_CHILDREN=%q", values)
		}
		r := f.Run(Round{Nodes: nodes, Peers: true, MaxChildren: mc})
		fmt.Printf("%12d %7.2f %8.2f %8.2f %7.2fx  sources %v\n", mc, r.Copies, r.First.Seconds(), r.Last.Seconds(), r.Last.Seconds()/alone.Last.Seconds(), r.Sources)
	}
}
