package sim

import (
	"fmt"
	"io"
	"time"
)

// Summary is one setting over one or more seeds: the percentiles of the live nodes' times to
// READY (every run's nodes together), and per run the origin's copies, the nodes that took the
// registry, the dead and the orphans (means).
type Summary struct {
	P50, P99, P999, Max            float64
	Copies, Registry, Dead, Orphan float64
	MaxDepth                       int
	Formed                         float64 // the striped forest's: the latest Result.Formed of the runs
}

// Runs runs p with seeds p.Seed+1 .. p.Seed+seeds and summarises them.
func Runs(p Params, seeds int) (Summary, error) {
	var all []float64
	var s Summary
	base := p.Seed
	for i := range max(seeds, 1) {
		p.Seed = base + uint64(i) + 1
		r, err := Run(p)
		if err != nil {
			return Summary{}, err
		}
		all = append(all, r.Alive()...)
		s.Copies += r.Copies
		s.Registry += float64(r.Registry)
		s.Dead += float64(r.Dead)
		s.Orphan += float64(r.Orphans)
		s.Formed = max(s.Formed, r.Formed)
		for _, d := range r.Depth {
			s.MaxDepth = max(s.MaxDepth, d)
		}
	}
	k := float64(max(seeds, 1))
	s.Copies, s.Registry, s.Dead, s.Orphan = s.Copies/k, s.Registry/k, s.Dead/k, s.Orphan/k
	s.P50, s.P99, s.P999, s.Max = Quantile(all, 0.5), Quantile(all, 0.99), Quantile(all, 0.999), Quantile(all, 1)
	return s, nil
}

// SummaryHeader is the header of Row's table.
func SummaryHeader() string {
	return fmt.Sprintf("%-44s %7s %7s %7s %7s %7s %8s %6s %6s %6s", "setting", "p50 s", "p99 s", "p99.9 s", "max s", "copies", "registry", "depth", "dead", "orphan")
}

// Row is s as a line of the table.
func (s Summary) Row(name string) string {
	return fmt.Sprintf("%-44s %7.2f %7.2f %7.2f %7.2f %7.2f %8.1f %6d %6.1f %6.1f", name, s.P50, s.P99, s.P999, s.Max, s.Copies, s.Registry, s.MaxDepth, s.Dead, s.Orphan)
}

// Datacenter are the timings assumed for a fleet of real hosts (not calibrated: this machine's
// links are tc-shaped veths on 2 shared cores, whose hop delay is mostly the token bucket's queue
// and the CPUs'): a hop 2 ms (BLAKE3 of a 1 MiB piece and its write, well under 1 ms at 300 MB/s,
// a wake-up and a LAN's one way), a session open 0.5 ms, a listing 2 ms plus 20 us per peer (the
// dials and answers of one round, concurrent), 50 ms from the process's start to its first
// listing, 100 ms for a registry pull's manifest, index and headers, 300 ms to publish.
func Datacenter() Params {
	return Params{Start: 50 * time.Millisecond, Setup: 100 * time.Millisecond, Publish: 300 * time.Millisecond,
		HopDelay: 2 * time.Millisecond, Open: 500 * time.Microsecond, ListBase: 2 * time.Millisecond, ListPerPeer: 20 * time.Microsecond}
}

// Kraken's published rollout: a 3 GB image to 2,600 hosts at once, 300 MB/s per agent.
const (
	KrakenBytes = 3_000_000_000
	KrakenNodes = 2600
	KrakenRate  = 300e6
)

// KrakenPublished is Kraken's p50, p99 and p99.9 of that rollout, in seconds.
var KrakenPublished = [3]float64{10, 18, 22}

// krakenSeeds is how many runs each Kraken row pools.
const krakenSeeds = 2

// PrintKraken prints the model's predictions for Kraken's setting: the protocol as it is (one
// chain), without failures and with 1% of the nodes dying mid-transfer, beside the alternatives:
// a tree of chains (fan-out by depth) and a forest (several rendezvous roots, a chain each).
func PrintKraken(w io.Writer) error {
	layout, err := SynthLayout(KrakenBytes, 8)
	if err != nil {
		return err
	}
	base := Datacenter()
	base.Nodes, base.Layout, base.Rate = KrakenNodes, layout, KrakenRate
	fmt.Fprintf(w, "Kraken's setting: %d nodes, %.1f GB (a synthetic model of %d pieces, the largest tensor %d MiB), %.0f MB/s every link, the origin's one link unless said\n",
		KrakenNodes, float64(layout.Bytes)/1e9, len(layout.Pieces), layout.Largest>>20, KrakenRate/1e6)
	fmt.Fprintf(w, "assumed timings (sim.Datacenter): hop %v, open %v, listing %v + %v per peer, start %v, registry setup %v, publish %v; %d seeds each\n",
		base.HopDelay, base.Open, base.ListBase, base.ListPerPeer, base.Start, base.Setup, base.Publish, krakenSeeds)
	fmt.Fprintf(w, "Kraken publishes p50 %.0f s, p99 %.0f s, p99.9 %.0f s\n\n", KrakenPublished[0], KrakenPublished[1], KrakenPublished[2])
	fmt.Fprintln(w, SummaryHeader())
	// fast is a control plane fast enough for the chain to form before RootWait: session opens of
	// 0.1 ms, a listing of 2 ms + 1 us per peer.
	fast := func(p *Params) { p.Open, p.ListPerPeer = 100*time.Microsecond, time.Microsecond }
	rows := []struct {
		name string
		edit func(*Params)
	}{
		{"chain (the protocol, max_children 1)", func(*Params) {}},
		{"chain, 1% die", func(p *Params) { p.Fail = 0.01 }},
		{"chain, fast control (open 0.1 ms, 1 us/peer)", fast},
		{"chain, fast control, 1% die", func(p *Params) { fast(p); p.Fail = 0.01 }},
		{"tree of chains: fan-out 2 at depths 0-3", func(p *Params) { p.FanOut, p.Shallowest = []int{2, 2, 2, 2}, true }},
		{"forest: 16 roots, origin 16 links", func(p *Params) { p.Roots, p.OriginRate = 16, 16*p.Rate }},
		{"forest: 16 roots, origin 16 links, 1% die", func(p *Params) { p.Roots, p.OriginRate, p.Fail = 16, 16*p.Rate, 0.01 }},
		{"forest: 32 roots, origin 32 links", func(p *Params) { p.Roots, p.OriginRate = 32, 32*p.Rate }},
		{"forest: 32 roots, origin 32 links, 1% die", func(p *Params) { p.Roots, p.OriginRate, p.Fail = 32, 32*p.Rate, 0.01 }},
	}
	for _, r := range rows {
		p := base
		r.edit(&p)
		s, err := Runs(p, krakenSeeds)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Fprintln(w, s.Row(r.name))
	}
	return nil
}
