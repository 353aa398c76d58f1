package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/weightsnap/weightsnap/peer/stripes"
)

// Calibration: the model's timings for the machine a Measured ran on, and its predictions beside
// the measurement. Two numbers are fitted, each on its own observable (the root's READY and the
// fleet's lag behind it), neither on the p50, p99 or max it predicts; the rest is physics or
// measured:
//   - Rate: the tbf rate times the payload share of a full frame (1448 bytes of TCP payload with
//     timestamps in a 1514-byte Ethernet frame, which tbf counts), or, where one node alone beat
//     that, its bytes over its time less the unshaped run's;
//   - Machine: one node alone unshaped, the bytes per second this machine's CPUs move at most;
//   - Publish: the median of the nodes' publication times (their reports);
//   - Start: one node alone's time less its bytes at Rate and Publish (process start, planning,
//     the registry's manifest and index);
//   - Open, listing: the join's measured costs (MeasuredJoin);
//   - Contention (fitted): from every round, the root's READY against the machine's load at N
//     streams (N x Rate / Machine), by least squares of the slowing the model gives at that load
//     (Contention x load, or the machine's bound, load - 1): the chain's over one node alone's,
//     less one; the striped forest's past one node alone's, over one link's time for the bytes;
//   - HopDelay (fitted): the chain's from the largest round, the least-squares slope of time to
//     READY over depth (depth from each node's source) less one piece's time at Rate slowed by
//     the load; the striped forest's (where a node's source differs by stripe) by least squares
//     of the modelled mean lag of the nodes behind the root on the measured one over the rounds,
//     the root passing on tensors (a forest run's lag behind its root is a tensor's, not a piece's).
type Calibration struct {
	Measured *Measured
	Params   Params    // the fleet's, Nodes unset
	Slope    float64   // the chain's: seconds to READY per depth in the largest round
	Lags     []float64 // the striped forest's: each round's nodes' mean lag behind the root
	Rows     []CalibrationRow
}

// CalibrationRow is one round: measured and predicted.
type CalibrationRow struct {
	Nodes                      int
	Measured, Predicted        [3]float64 // p50, p99, max seconds
	MeasuredCopies, PredCopies float64
}

// frameShare is TCP's payload share of a full Ethernet frame (MTU 1500, timestamps): 1448/1514.
const frameShare = 1448.0 / 1514.0

// calibrationSeeds is how many runs each predicted row pools.
const calibrationSeeds = 5

// Calibrate sets the model from m and predicts each of its rounds.
func Calibrate(m *Measured) (*Calibration, error) {
	size, err := sizeBytes(m.Size)
	if err != nil {
		return nil, err
	}
	layout, err := SynthLayout(size, m.Shards)
	if err != nil {
		return nil, err
	}
	// The files hold the tensors, their headers and a few small JSON files.
	if d := float64(m.Bytes-layout.Bytes) / float64(m.Bytes); d < 0 || d > 0.01 {
		return nil, fmt.Errorf("sim: the synthetic layout of %s has %d tensor bytes, the measured artifact %d", m.Size, layout.Bytes, m.Bytes)
	}
	rate := float64(m.RateMbit) * 1e6 / 8 * frameShare
	var publish []float64
	for _, r := range m.Rounds {
		for _, n := range r.Each {
			publish = append(publish, n.PublishS)
		}
	}
	pub := Quantile(publish, 0.5)
	start := m.AloneS - float64(m.Bytes)/rate - pub
	if start < 0 {
		// The link carried more than the frame share (tbf's bucket, larger
		// segments): the rate is one node alone's, less its start, which the
		// unshaped run bounds.
		start = min(m.UnshapedS, m.AloneS/2)
		rate = float64(m.Bytes) / (m.AloneS - start - pub)
	}
	c := &Calibration{Measured: m, Params: MeasuredJoin(Params{Layout: layout, Rate: rate,
		Machine: float64(m.Bytes) / m.UnshapedS, Start: seconds(start), Publish: seconds(pub)})}
	if m.Structure == "forest" {
		err = c.fitStriped()
	} else {
		err = c.fitChain()
	}
	if err != nil {
		return nil, err
	}
	for _, r := range m.Rounds {
		p := c.Params
		p.Nodes = r.Nodes
		s, err := Runs(p, calibrationSeeds)
		if err != nil {
			return nil, err
		}
		ready := r.Ready()
		c.Rows = append(c.Rows, CalibrationRow{Nodes: r.Nodes,
			Measured:       [3]float64{Quantile(ready, 0.5), Quantile(ready, 0.99), Quantile(ready, 1)},
			Predicted:      [3]float64{s.P50, s.P99, s.Max},
			MeasuredCopies: r.Copies, PredCopies: s.Copies})
	}
	return c, nil
}

// load is the machine's load with n nodes' links busy at the calibrated rate.
func (c *Calibration) load(n int) float64 { return float64(n) * c.Params.Rate / c.Params.Machine }

// largest is the measurement's round of the most nodes.
func (c *Calibration) largest() MeasuredRound {
	largest := c.Measured.Rounds[0]
	for _, r := range c.Measured.Rounds {
		if r.Nodes > largest.Nodes {
			largest = r
		}
	}
	return largest
}

// rootReady is the time to READY of the round's node that took the registry.
func rootReady(r MeasuredRound) (float64, error) {
	root := slices.IndexFunc(r.Each, func(n MeasuredNode) bool { return n.Parent < 0 })
	if root < 0 {
		return 0, fmt.Errorf("sim: the round of %d nodes has no root", r.Nodes)
	}
	return r.Each[root].ReadyS, nil
}

// contention fits Params.Contention: the least-squares fit of y(round's root READY) to the
// slowing the model gives a link at the machine's load x of the round's nodes, max(C x, x - 1)
// (Contention, or the machine's bound).
func (c *Calibration) contention(y func(root float64) float64) (float64, error) {
	var xs, ys []float64
	for _, r := range c.Measured.Rounds {
		root, err := rootReady(r)
		if err != nil {
			return 0, err
		}
		xs, ys = append(xs, c.load(r.Nodes)), append(ys, y(root))
	}
	return leastOver(100, func(k float64) float64 {
		var e float64
		for i, x := range xs {
			d := ys[i] - max(k*x, x-1)
			e += d * d
		}
		return e
	}), nil
}

// leastOver is the x in [0, hi] where f, falling then rising there, is least: the span narrowed
// by thirds.
func leastOver(hi float64, f func(float64) float64) float64 {
	lo := 0.0
	for range 100 {
		a, b := lo+(hi-lo)/3, hi-(hi-lo)/3
		if f(a) <= f(b) {
			hi = b
		} else {
			lo = a
		}
	}
	return lo
}

// fitChain fits the chain's Contention and HopDelay.
func (c *Calibration) fitChain() error {
	m, p := c.Measured, &c.Params
	largest := c.largest()
	slope, err := depthSlope(largest)
	if err != nil {
		return err
	}
	if p.Contention, err = c.contention(func(root float64) float64 { return root/m.AloneS - 1 }); err != nil {
		return err
	}
	piece := float64(p.Layout.Pieces[0]) / p.Rate * (1 + p.Contention*c.load(largest.Nodes))
	c.Slope, p.HopDelay = slope, seconds(max(slope-piece, 0))
	return nil
}

// fitStriped fits the striped forest's Contention and HopDelay, the root passing on tensors.
func (c *Calibration) fitStriped() error {
	m, p := c.Measured, &c.Params
	p.Stripes, p.RootPieces = stripes.DefaultStripes, false
	oneLink := float64(p.Layout.Bytes) / p.Rate
	var err error
	if p.Contention, err = c.contention(func(root float64) float64 { return (root - m.AloneS) / oneLink }); err != nil {
		return err
	}
	lags := make([]float64, len(m.Rounds))
	for i, r := range m.Rounds {
		root, err := rootReady(r)
		if err != nil {
			return err
		}
		if len(r.Each) < 2 {
			return fmt.Errorf("sim: the round of %d nodes has no node behind the root: no lag", r.Nodes)
		}
		for _, n := range r.Each {
			lags[i] += n.ReadyS - root
		}
		lags[i] /= float64(len(r.Each) - 1)
	}
	c.Lags = lags
	var failed error
	hop := leastOver(2, func(hop float64) float64 { // seconds a hop, at most 2
		var e float64
		for i, r := range m.Rounds {
			q := *p
			q.Nodes, q.HopDelay = r.Nodes, seconds(hop)
			l, err := stripedLag(q)
			if err != nil {
				failed = err
			}
			e += (l - lags[i]) * (l - lags[i])
		}
		return e
	})
	p.HopDelay = seconds(hop)
	return failed
}

// stripedLag is the model's mean lag of the nodes behind the root (the first READY), over
// calibrationSeeds runs of p.
func stripedLag(p Params) (float64, error) {
	var sum float64
	var n int
	for i := range calibrationSeeds {
		p.Seed = uint64(i) + 1
		r, err := Run(p)
		if err != nil {
			return 0, err
		}
		ready := r.Alive()
		root := slices.Min(ready)
		for _, t := range ready {
			sum += t - root
		}
		n += len(ready) - 1
	}
	return sum / float64(max(n, 1)), nil
}

// depthSlope is the least-squares slope of the nodes' times to READY over their depth, the nodes
// below the root's child (whose lag is the root's whole tensor, not a piece).
func depthSlope(r MeasuredRound) (float64, error) {
	var xs, ys []float64
	for i, n := range r.Each {
		d, err := depthOf(r, i)
		if err != nil {
			return 0, err
		}
		if d >= 1 {
			xs, ys = append(xs, float64(d)), append(ys, n.ReadyS)
		}
	}
	if len(xs) < 2 {
		return 0, fmt.Errorf("sim: the round of %d nodes has %d nodes below the root: no slope", r.Nodes, len(xs))
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(xs))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, fmt.Errorf("sim: the round of %d nodes has every node at one depth: no slope", r.Nodes)
	}
	return sxy / sxx, nil
}

// depthOf is node i's depth in the round: 0 from the registry, its source's plus one otherwise.
func depthOf(r MeasuredRound, i int) (int, error) {
	d := 0
	for j := i; r.Each[j].Parent >= 0; j = r.Each[j].Parent {
		if d++; d > len(r.Each) || r.Each[j].Parent >= len(r.Each) {
			return 0, fmt.Errorf("sim: node %d of the round of %d: its sources form no chain to the registry", i, r.Nodes)
		}
	}
	return d, nil
}

// Worst is the largest relative error of p50, p99 and max over the rows.
func (c *Calibration) Worst() float64 {
	w := 0.0
	for _, r := range c.Rows {
		for k := range r.Measured {
			w = max(w, math.Abs(r.Predicted[k]-r.Measured[k])/r.Measured[k])
		}
	}
	return w
}

// Print writes the calibration: the model's timings and the two tables side by side.
func (c *Calibration) Print(w io.Writer) {
	m, p := c.Measured, c.Params
	structure := m.Structure
	if structure == "" {
		structure = "chain"
	}
	fmt.Fprintf(w, "measured: %s (%d bytes), structure %s, %d Mbit/s links, %d cores, load %s; one node alone %.2fs\n", m.Size, m.Bytes, structure, m.RateMbit, m.Cores, m.Load, m.AloneS)
	fmt.Fprintf(w, "  by: %s\n", m.Command)
	n := c.largest().Nodes
	fmt.Fprintf(w, "model: rate %.2f MB/s (the link's goodput), machine %.0f MB/s (one node alone unshaped), contention %.2f (fitted on the roots' READY),\n",
		p.Rate/1e6, p.Machine/1e6, p.Contention)
	if p.Stripes > 0 {
		fmt.Fprintf(w, "  %d stripes at most, the root passing on tensors; hop delay %v (fitted on the nodes' mean lag behind the root, %.2f s at %d nodes),\n",
			p.Stripes, p.HopDelay.Round(time.Millisecond), c.Lags[len(c.Lags)-1], n)
	} else {
		fmt.Fprintf(w, "  hop delay %v (fitted: %.0f ms per depth at %d nodes less a piece's %.0f ms),\n",
			p.HopDelay.Round(time.Millisecond), c.Slope*1e3, n, float64(p.Layout.Pieces[0])/p.Rate*(1+p.Contention*c.load(n))*1e3)
	}
	fmt.Fprintf(w, "  start %v, publish %v (measured median), open %v, listing %v + %v per peer (measured, sim.MeasuredJoin)\n",
		p.Start.Round(time.Millisecond), p.Publish.Round(time.Millisecond), p.Open, p.ListBase, p.ListPerPeer)
	fmt.Fprintf(w, "%5s | %-30s | %-30s | %s\n", "", "measured", "predicted", "error")
	fmt.Fprintf(w, "%5s | %6s %7s %7s %7s | %6s %7s %7s %7s | %6s %6s %6s\n", "nodes", "copies", "p50 s", "p99 s", "max s", "copies", "p50 s", "p99 s", "max s", "p50", "p99", "max")
	for _, r := range c.Rows {
		fmt.Fprintf(w, "%5d | %6.2f %7.2f %7.2f %7.2f | %6.2f %7.2f %7.2f %7.2f | %+5.1f%% %+5.1f%% %+5.1f%%\n", r.Nodes,
			r.MeasuredCopies, r.Measured[0], r.Measured[1], r.Measured[2], r.PredCopies, r.Predicted[0], r.Predicted[1], r.Predicted[2],
			100*(r.Predicted[0]-r.Measured[0])/r.Measured[0], 100*(r.Predicted[1]-r.Measured[1])/r.Measured[1], 100*(r.Predicted[2]-r.Measured[2])/r.Measured[2])
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
