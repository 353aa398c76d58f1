//go:build bench

package fleet

// The fleet benchmark, run by scripts/bench-fleet.sh (make bench), never by make test:
//
//	go test -tags bench -count=1 -timeout 120m -v -run '^TestFleetBench$' ./test/fleet/
//
// Env: BENCH_FLEET_NODES (default "2 4 8 16"), BENCH_FLEET_SIZE (default 256MiB),
// BENCH_FLEET_RATE_MBIT (default benchRateMbit), BENCH_FLEET_JSON (also write each fleet round's
// nodes, sim.Measured, to this file: test/fleet/sim's calibration reads it),
// BENCH_FLEET_STRUCTURE (the fleet rounds' [peer] structure, default the chain),
// BENCH_FLEET_REGISTRY (0 leaves out the registry-only rounds), BENCH_FLEET_KILL (1 adds, at the
// largest count, a fleet round with one node killed mid-transfer).

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

	"github.com/weightsnap/weightsnap/test/fleet/sim"
)

// benchRateMbit is every link's rate. One node alone, unshaped, resolves 256 MiB from the registry
// on this 2-core virtual machine at about 3 Gbit/s (0.72 s, measured with the machine shared, load
// average about 7; the bench's first line measures it again every run): hashing and copying, not
// the veth, bound it. With chain seeding, 16 nodes each receive at the link's rate at once, so the
// machine must take in 16 links' worth at the same time: 100 Mbit/s (12.5 MB/s, about 22 s for one
// copy of 256 MiB) times 16 is 1.6 Gbit/s, about half of one node's unshaped rate, so the links,
// not the CPUs or a disk (stores and registry are on tmpfs), bound every row. A faster rate would
// let 16 nodes outrun the CPUs; a slower one only makes the run longer (about 25 minutes at 100
// Mbit/s today, when every node still pulls from the origin).
const benchRateMbit = 100

func TestFleetBench(t *testing.T) {
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
	size := "256MiB"
	if s := os.Getenv("BENCH_FLEET_SIZE"); s != "" {
		size = s
	}
	rate := benchRateMbit
	if s := os.Getenv("BENCH_FLEET_RATE_MBIT"); s != "" {
		var err error
		if rate, err = strconv.Atoi(s); err != nil {
			t.Fatalf("BENCH_FLEET_RATE_MBIT=%q", s)
		}
	}
	most := 1
	for _, n := range counts {
		most = max(most, n)
	}
	structure := os.Getenv("BENCH_FLEET_STRUCTURE")
	registryOnly := os.Getenv("BENCH_FLEET_REGISTRY") != "0"
	f := Start(t, Options{Nodes: most, Size: size, Shards: 4})
	unshaped := f.Run(Round{Nodes: 1})
	f.Shape(rate)
	alone := f.Run(Round{Nodes: 1})
	type row struct{ fleet, registry Result }
	var rows []row
	for _, n := range counts {
		r := row{fleet: f.Run(Round{Nodes: n, Peers: true, Structure: structure})}
		if registryOnly {
			r.registry = f.Run(Round{Nodes: n})
		}
		rows = append(rows, r)
		t.Logf("%d nodes done", n)
	}
	var killed *Result
	if os.Getenv("BENCH_FLEET_KILL") == "1" {
		k := f.killedRound(t, Round{Nodes: most, Peers: true, Structure: structure})
		killed = &k
	}

	load, _ := os.ReadFile("/proc/loadavg") // the machine may be shared: say how busy it was
	if structure == "" {
		structure = "chain"
	}
	fmt.Printf("\nweightsnap fleet benchmark: %s (%d bytes), tcp, structure %s, every link %d Mbit/s both ways (tbf), %d cores, load average at the end %s\n",
		size, f.Bytes, structure, rate, runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("one node alone, unshaped: %.2fs (%.0f Mbit/s); on the %d Mbit/s links: %.2fs (%.0f Mbit/s)\n",
		unshaped.Last.Seconds(), mbits(f.Bytes, unshaped), rate, alone.Last.Seconds(), mbits(f.Bytes, alone))
	if need := float64(most * rate); need > mbits(f.Bytes, unshaped)/1.5 {
		fmt.Printf("warning: %d nodes at %d Mbit/s each is %.0f Mbit/s, not well below one node's unshaped %.0f Mbit/s: the CPUs may bound the largest rows\n",
			most, rate, need, mbits(f.Bytes, unshaped))
	}
	fmt.Printf("%5s | %-60s | %-60s\n", "", "fleet: resolve with the other nodes as peers", "registry only")
	fmt.Printf("%5s | %7s %7s %7s %8s %8s %8s %9s | %7s %7s %7s %8s %8s %8s %9s\n", "nodes",
		"copies", "p50 s", "p99 s", "first s", "last s", "/alone", "origin MB", "copies", "p50 s", "p99 s", "first s", "last s", "/alone", "origin MB")
	for _, r := range rows {
		reg := "(left out)"
		if registryOnly {
			reg = cells(r.registry, alone)
		}
		fmt.Printf("%5d | %s | %s\n", r.fleet.Nodes, cells(r.fleet, alone), reg)
	}
	if killed != nil {
		fmt.Printf("%5d | %s | one node killed mid-transfer; the others' times\n", killed.Nodes, cells(*killed, alone))
	}
	fmt.Println("copies: the origin interface's tx bytes over the artifact's; p50/p99: of the nodes' times from the common start to READY (nearest rank: of 16, the 8th and the 16th);")
	fmt.Println("first/last: the first and the last READY (last is the max); /alone: last over one node alone on the same links")
	for _, r := range rows {
		fmt.Printf("sources at %d nodes: fleet %v, registry only %v\n", r.fleet.Nodes, r.fleet.Sources, r.registry.Sources)
	}
	if path := os.Getenv("BENCH_FLEET_JSON"); path != "" {
		m := sim.Measured{Command: benchCommand(counts, size, rate, structure), Size: size, Bytes: f.Bytes, Shards: 4, RateMbit: rate, Cores: runtime.NumCPU(),
			Load: strings.Join(strings.Fields(string(load))[:3], " "), UnshapedS: unshaped.Last.Seconds(), AloneS: alone.Last.Seconds(), Structure: structure}
		for _, r := range rows {
			m.Rounds = append(m.Rounds, f.measured(r.fleet))
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

// cells are a round's columns of the table: copies, the p50 and p99 of the nodes' times to
// READY, the first and the last, the last over one node alone, the origin's egress.
func cells(r Result, alone Result) string {
	var ends []float64
	for _, d := range r.Ends {
		if d > 0 { // a lost node has none
			ends = append(ends, d.Seconds())
		}
	}
	return fmt.Sprintf("%7.2f %7.2f %7.2f %8.2f %8.2f %7.2fx %9.0f", r.Copies, sim.Quantile(ends, 0.5), sim.Quantile(ends, 0.99),
		r.First.Seconds(), r.Last.Seconds(), r.Last.Seconds()/alone.Last.Seconds(), float64(r.OriginBytes)/1e6)
}

// killedRound runs r with one node killed mid-transfer: the second of the rendezvous ranking (in
// the forest, the head of the first stripe), once it has verified a quarter of the artifact.
func (f *Fleet) killedRound(t *testing.T, r Round) Result {
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
	return ro.Wait()
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
func benchCommand(counts []int, size string, rate int, structure string) string {
	ns := make([]string, len(counts))
	for i, n := range counts {
		ns[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("BENCH_FLEET_STRUCTURE=%s BENCH_FLEET_SIZE=%s BENCH_FLEET_RATE_MBIT=%d BENCH_FLEET_JSON=FILE scripts/bench-fleet.sh %s", structure, size, rate, strings.Join(ns, " "))
}

// mbits is the rate of moving bytes in a round's last READY.
func mbits(bytes int64, r Result) float64 { return float64(bytes) * 8 / r.Last.Seconds() / 1e6 }

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
