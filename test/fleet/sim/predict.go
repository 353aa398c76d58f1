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

// Params is base for the setting: its nodes, its synthetic model's layout and its links.
func (st Setting) Params(base Params) (Params, error) {
	layout, err := SynthLayout(st.Bytes, st.Shards)
	if err != nil {
		return Params{}, err
	}
	base.Nodes, base.Layout, base.Rate = st.Nodes, layout, st.Rate
	return base, nil
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
		sp, err := st.Params(base)
		if err != nil {
			return err
		}
		for _, pieces := range []bool{false, true} {
			for _, fail := range []float64{0, 0.01} {
				p := sp
				p.RootPieces, p.Fail = pieces, fail
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

// RootCase is a rollout on the striped forest whose root is predicted to die.
type RootCase struct {
	Name   string
	Params Params // the fleet, its links, its artifact and timings
	Seeds  int
}

// PrintRootDies prints the striped forest's predictions with its root dying once it has pulled
// share of the artifact from the registry: each case with the root living, its process killed
// (its sessions reset at once) and its host gone silent (its sessions failing SessionTimeout
// later), each percentile also over the floor, the origin's copies and the nodes that took the
// registry.
func PrintRootDies(w io.Writer, cases []RootCase, share float64) error {
	fmt.Fprintf(w, "the striped forest's root dies with %.0f%% of the artifact pulled; its successor takes the registry for every file it had not landed whole\n", share*100)
	fmt.Fprintln(w, "copies: the origin's payload over the artifact's (at most 1 + the root's share); registry: nodes that took it")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-38s %-7s %8s %7s %7s %7s %7s %6s %6s %6s %6s %8s %6s\n", "setting", "root", "floor s", "p50 s", "p99 s", "p99.9 s", "max s", "p50 x", "p99 x", "max x", "copies", "registry", "orphan")
	for _, c := range cases {
		for _, row := range []struct {
			root   string
			kill   float64
			detect time.Duration
		}{{"lives", 0, 0}, {"killed", share, 0}, {"silent", share, SessionTimeout}} {
			p := c.Params
			p.KillRoot, p.RootDetect = row.kill, row.detect
			s, err := Runs(p, c.Seeds)
			if err != nil {
				return fmt.Errorf("%s, the root %s: %w", c.Name, row.root, err)
			}
			floor := Floor(p)
			fmt.Fprintf(w, "%-38s %-7s %8.2f %7.2f %7.2f %7.2f %7.2f %6.3f %6.3f %6.3f %6.2f %8.1f %6.1f\n", c.Name, row.root, floor,
				s.P50, s.P99, s.P999, s.Max, s.P50/floor, s.P99/floor, s.Max/floor, s.Copies, s.Registry, s.Orphan)
		}
	}
	return nil
}

// RootCases are the settings the root's death is predicted for: Kraken's, with base's timings
// (StripedBase is the default) and the root passing on pieces, and, with c, the bench's at its
// largest round, with the calibrated model.
func RootCases(base Params, c *Calibration) ([]RootCase, error) {
	kraken := StripedSettings[0]
	p, err := kraken.Params(base)
	if err != nil {
		return nil, err
	}
	if p.Stripes <= 0 {
		p.Stripes = stripes.DefaultStripes
	}
	p.RootPieces = true
	cases := []RootCase{{Name: kraken.Name, Params: p, Seeds: kraken.Seeds}}
	if c != nil {
		m, b := c.Measured, c.Params
		b.Nodes = c.largest().Nodes
		cases = append(cases, RootCase{Name: fmt.Sprintf("the bench: %s, %d nodes, %d Mbit/s", m.Size, b.Nodes, m.RateMbit), Params: b, Seeds: calibrationSeeds})
	}
	return cases, nil
}
