package sim

import (
	"fmt"
	"io"
	"time"

	"github.com/weightsnap/weightsnap/peer/stripes"
)

// Floor is the time one node alone takes from the origin: its start, the registry's setup, the
// artifact over one link and its publication.
func Floor(p Params) float64 {
	return (p.Start + p.Setup + p.Publish).Seconds() + float64(p.Layout.Bytes)/p.Rate
}

// StripedBase is the striped forest's predictions' timings: sim.Datacenter's with the join's
// measured costs (MeasuredJoin).
func StripedBase() Params { return MeasuredJoin(Datacenter()) }

// Setting is a fleet rollout a prediction is made for.
type Setting struct {
	Name   string
	Bytes  int64
	Shards int
	Nodes  int
	Rate   float64 // bytes per second, every link
	Seeds  int
}

// StripedSettings are the settings the striped forest is predicted for: Kraken's published
// rollout, Dragonfly's published case (its links taken as fast as Kraken's design goal's) and
// Kraken's design goal.
var StripedSettings = []Setting{
	{"Kraken: 3 GB, 2,600 nodes, 300 MB/s", KrakenBytes, 8, KrakenNodes, KrakenRate, 2},
	{"Dragonfly: 130 GB, 200 nodes, 25 Gbit/s", 130e9, 26, 200, 25e9 / 8, 1},
	{"100 GB, 10,000 nodes, 25 Gbit/s", 100e9, 20, 10000, 25e9 / 8, 1},
}

// PrintStriped prints the striped forest's predictions for each setting: with the root passing on
// whole tensors (as the registry's index allows) and pieces (an index with chaining values),
// without failures and with 1% of the nodes dying, each percentile also over the floor. base gives
// the timings and the stripe count (0: stripes.DefaultStripes); StripedBase is the default.
func PrintStriped(w io.Writer, settings []Setting, base Params) error {
	if base.Stripes <= 0 {
		base.Stripes = stripes.DefaultStripes
	}
	fmt.Fprintf(w, "the striped forest, %d stripes; hop %v, session open %v, start %v, registry setup %v, publish %v\n",
		base.Stripes, base.HopDelay.Round(time.Millisecond/10), base.Open, base.Start, base.Setup, base.Publish.Round(time.Millisecond/10))
	fmt.Fprintln(w, "formed: every node placed and its sessions open, seconds from the start")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-42s %-8s %5s %8s %7s %7s %7s %7s %7s %7s %6s %6s %6s %6s\n", "setting", "root", "fail", "floor s", "p50 s", "p99 s", "p99.9 s", "p50 x", "p99 x", "p99.9 x", "copies", "depth", "orphan", "formed")
	for _, st := range settings {
		layout, err := SynthLayout(st.Bytes, st.Shards)
		if err != nil {
			return err
		}
		for _, pieces := range []bool{false, true} {
			for _, fail := range []float64{0, 0.01} {
				p := base
				p.Nodes, p.Layout, p.Rate, p.RootPieces, p.Fail = st.Nodes, layout, st.Rate, pieces, fail
				s, err := Runs(p, st.Seeds)
				if err != nil {
					return fmt.Errorf("%s: %w", st.Name, err)
				}
				root := "tensors"
				if pieces {
					root = "pieces"
				}
				floor := Floor(p)
				fmt.Fprintf(w, "%-42s %-8s %4.0f%% %8.2f %7.2f %7.2f %7.2f %7.3f %7.3f %7.3f %6.2f %6d %6.1f %6.2f\n", st.Name, root, fail*100, floor,
					s.P50, s.P99, s.P999, s.P50/floor, s.P99/floor, s.P999/floor, s.Copies, s.MaxDepth, s.Orphan, s.Formed)
			}
		}
	}
	return nil
}
