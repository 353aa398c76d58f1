// Command fleetsim runs the fleet model (test/fleet/sim) for one setting, or Kraken's (-kraken),
// and prints each node's time to READY as p50, p99, p99.9 and max, and the origin's copies.
//
//	go run ./test/fleet/sim/cmd/fleetsim -kraken
//	go run ./test/fleet/sim/cmd/fleetsim -striped
//	go run ./test/fleet/sim/cmd/fleetsim -calibrate test/fleet/sim/testdata/measured.json
//	go run ./test/fleet/sim/cmd/fleetsim -calibrate test/fleet/sim/testdata/measured-forest.json -striped
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
		rate, fail, slow, slowRate                     float64
		start, setup, publish, hop, open, lbase, lpeer time.Duration
		slowAfter                                      time.Duration
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
	if calibrate != "" {
		m, err := sim.ReadMeasured(calibrate)
		if err == nil {
			var c *sim.Calibration
			if c, err = sim.Calibrate(m); err == nil {
				c.Print(os.Stdout)
				// The striped predictions with the calibrated hop delay and publication.
				base.HopDelay, base.Publish = c.Params.HopDelay, c.Params.Publish
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim:", err)
			os.Exit(1)
		}
		if !striped {
			return
		}
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
