// Command fleetsim runs the fleet model (test/fleet/sim) for one setting, or Kraken's (-kraken),
// and prints each node's time to READY as p50, p99, p99.9 and max, and the origin's copies.
//
//	go run ./test/fleet/sim/cmd/fleetsim -kraken
//	go run ./test/fleet/sim/cmd/fleetsim -striped
//	go run ./test/fleet/sim/cmd/fleetsim -calibrate test/fleet/sim/testdata/measured.json
//	go run ./test/fleet/sim/cmd/fleetsim -calibrate test/fleet/sim/testdata/measured-forest.json -striped
//	go run ./test/fleet/sim/cmd/fleetsim -kill-root 0.5 -calibrate test/fleet/sim/testdata/measured-forest.json
//	go run ./test/fleet/sim/cmd/fleetsim -nodes 16 -size 256MiB -rate 11.95 -hop-delay 130ms
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/test/fleet/sim"
)

func main() {
	var (
		kraken, striped, rootPieces                    bool
		nodes, shards, maxChildren, roots, seeds, k    int
		size, fanout, calibrate                        string
		rate, fail, slow, slowRate, killRoot           float64
		start, setup, publish, hop, open, lbase, lpeer time.Duration
		slowAfter, rootDetect                          time.Duration
	)
	d := sim.StripedBase()
	flag.BoolVar(&striped, "striped", false, "print the striped forest's predictions for Kraken's, Dragonfly's and a 10,000-node setting (-stripes, or the forest's default; -hop-delay, -open, -start, -setup, -publish)")
	flag.BoolVar(&kraken, "kraken", false, "print the predictions for Kraken's setting (3 GB, 2,600 nodes, 300 MB/s), the protocol's and the alternatives")
	flag.StringVar(&calibrate, "calibrate", "", "print the calibration on this measurement (scripts/bench-fleet.sh's BENCH_FLEET_JSON); with -striped, the predictions take its hop delay and publication")
	flag.IntVar(&nodes, "nodes", 16, "nodes")
	flag.StringVar(&size, "size", "256MiB", "the synthetic model's size (weightsnap dev synth --size)")
	flag.IntVar(&shards, "shards", 4, "its shards")
	flag.Float64Var(&rate, "rate", 300, "every link's goodput, MB/s (10^6 bytes)")
	flag.IntVar(&maxChildren, "max-children", sim.DefaultMaxChildren, "[peer] max_children")
	flag.StringVar(&fanout, "fanout", "", "max children by depth, comma-separated (a tree of chains); past them -max-children")
	flag.IntVar(&roots, "roots", 1, "nodes of the rendezvous ranking that take the registry at once (a forest of chains)")
	flag.IntVar(&k, "stripes", 0, "the striped forest of this many stripes ([peer] stripes) instead of the chain")
	flag.BoolVar(&rootPieces, "root-pieces", false, "the origin's index carries each piece's chaining values: the striped root passes on pieces, not tensors")
	flag.Float64Var(&fail, "fail", 0, "fraction of nodes that die mid-transfer")
	flag.Float64Var(&slow, "slow", 0, "fraction of nodes whose uplink is slow (-stripes only)")
	flag.Float64Var(&slowRate, "slow-rate", 0.1, "a slow node's uplink over -rate")
	flag.DurationVar(&slowAfter, "slow-after", 0, "how long a slow source's children take to leave it for an adopter (0: they stay)")
	flag.Float64Var(&killRoot, "kill-root", 0, "the striped forest's root dies with this share of the artifact pulled from the registry; without -stripes, print the predictions for Kraken's setting (and, with -calibrate, the bench's at its largest round) with the root living, killed and gone silent")
	flag.DurationVar(&rootDetect, "root-detect", 0, "with -kill-root and -stripes: how long after its death the root's sessions fail (0: its process killed; 30s, sim.SessionTimeout: its host gone silent)")
	flag.IntVar(&seeds, "seeds", 1, "runs, seeds 1..N (the percentiles are over every run's nodes)")
	flag.DurationVar(&start, "start", d.Start, "process start to the first listing")
	flag.DurationVar(&setup, "setup", d.Setup, "a registry pull's manifest, index and headers")
	flag.DurationVar(&publish, "publish", d.Publish, "the last byte to READY")
	flag.DurationVar(&hop, "hop-delay", d.HopDelay, "a piece verified at one node to its first byte on the wire to the next")
	flag.DurationVar(&open, "open", d.Open, "one session open (its default measured: sim.MeasuredJoin)")
	flag.DurationVar(&lbase, "list-base", d.ListBase, "a listing round's fixed time (measured)")
	flag.DurationVar(&lpeer, "list-per-peer", d.ListPerPeer, "a listing round's time per peer (measured)")
	flag.Parse()
	base := sim.Params{Stripes: k, Start: start, Setup: setup, Publish: publish, HopDelay: hop, Open: open}
	var cal *sim.Calibration
	if calibrate != "" {
		m, err := sim.ReadMeasured(calibrate)
		if err == nil {
			cal, err = sim.Calibrate(m)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim:", err)
			os.Exit(1)
		}
	}
	if killRoot > 0 && k == 0 {
		cases, err := sim.RootCases(base, cal)
		if err == nil {
			err = sim.PrintRootDies(os.Stdout, cases, killRoot)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim:", err)
			os.Exit(1)
		}
		return
	}
	if cal != nil {
		cal.Print(os.Stdout)
		if !striped {
			return
		}
		// The striped predictions with the calibrated hop delay and publication.
		base.HopDelay, base.Publish = cal.Params.HopDelay, cal.Params.Publish
		fmt.Println()
	}
	if striped {
		if err := sim.PrintStriped(os.Stdout, sim.StripedSettings, base); err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim:", err)
			os.Exit(1)
		}
		return
	}
	if kraken {
		if err := sim.PrintKraken(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim:", err)
			os.Exit(1)
		}
		return
	}
	n, err := bytefmt.Parse(size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(2)
	}
	layout, err := sim.SynthLayout(n, shards)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(2)
	}
	p := sim.Params{Nodes: nodes, Layout: layout, Rate: rate * 1e6, MaxChildren: maxChildren, Roots: roots, Stripes: k, RootPieces: rootPieces, Fail: fail, Slow: slow, SlowRate: slowRate, SlowAfter: slowAfter,
		KillRoot: killRoot, RootDetect: rootDetect,
		Start: start, Setup: setup, Publish: publish, HopDelay: hop, Open: open, ListBase: lbase, ListPerPeer: lpeer}
	for _, f := range strings.Split(fanout, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "fleetsim: -fanout %q\n", fanout)
			os.Exit(2)
		}
		p.FanOut = append(p.FanOut, k)
	}
	s, err := sim.Runs(p, seeds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
	fmt.Println(sim.SummaryHeader())
	fmt.Println(s.Row(fmt.Sprintf("%d nodes", nodes)))
}
