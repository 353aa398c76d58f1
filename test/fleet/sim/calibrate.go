package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Calibration: the model's timings for the machine a Measured ran on, and its predictions beside
// the measurement. Two numbers are fitted, each on its own observable (the root's READY and the
// slope over depth), neither on the p50 or p99 it predicts; the rest is physics or measured:
//   - Rate: the tbf rate times the payload share of a full frame (1448 bytes of TCP payload with
//     timestamps in a 1514-byte Ethernet frame, which tbf counts);
//   - Machine: one node alone unshaped, the bytes per second this machine's CPUs move at most;
//   - Contention (fitted): from every round, the root's READY over one node alone's, less one,
//     over the machine's load at N streams (N x Rate / Machine), by least squares through 0;
//   - Publish: the median of the nodes' publication times (their reports);
//   - Start: one node alone's time less its bytes at Rate and Publish (process start, planning,
//     the registry's manifest and index);
//   - HopDelay (fitted): from the largest round, the least-squares slope of time to READY over
//     depth (depth from each node's source) less one piece's time at Rate slowed by the load;
//   - Open, listing: assumed small (2 ms, 10 ms + 1 ms per peer): at 16 nodes they stay hidden
//     under the first tensor's lag.
type Calibration struct {
	Measured *Measured
	Params   Params // the fleet's, Nodes unset
	Slope    float64
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
		return nil, fmt.Errorf("sim: one node alone (%.2fs) is faster than its bytes at %.0f B/s: the rate is wrong", m.AloneS, rate)
	}
	largest := m.Rounds[0]
	for _, r := range m.Rounds {
		if r.Nodes > largest.Nodes {
			largest = r
		}
	}
	slope, err := depthSlope(largest)
	if err != nil {
		return nil, err
	}
	machine := float64(m.Bytes) / m.UnshapedS
	load := func(nodes int) float64 { return float64(nodes) * rate / machine }
	var sxy, sxx float64
	for _, r := range m.Rounds {
		root := slices.IndexFunc(r.Each, func(n MeasuredNode) bool { return n.Parent < 0 })
		if root < 0 {
			return nil, fmt.Errorf("sim: the round of %d nodes has no root", r.Nodes)
		}
		y := r.Each[root].ReadyS/m.AloneS - 1
		sxy, sxx = sxy+load(r.Nodes)*y, sxx+load(r.Nodes)*load(r.Nodes)
	}
	contention := max(sxy/sxx, 0)
	piece := float64(layout.Pieces[0]) / rate * (1 + contention*load(largest.Nodes))
	hop := max(slope-piece, 0)
	c := &Calibration{Measured: m, Slope: slope, Params: Params{Layout: layout, Rate: rate,
		Machine: machine, Contention: contention, Start: seconds(start), Publish: seconds(pub), HopDelay: seconds(hop),
		Open: 2 * time.Millisecond, ListBase: 10 * time.Millisecond, ListPerPeer: time.Millisecond}}
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

// Worst is the largest relative error of p50 and p99 over the rows.
func (c *Calibration) Worst() float64 {
	w := 0.0
	for _, r := range c.Rows {
		for k := range 2 {
			w = max(w, math.Abs(r.Predicted[k]-r.Measured[k])/r.Measured[k])
		}
	}
	return w
}

// Print writes the calibration: the model's timings and the two tables side by side.
func (c *Calibration) Print(w io.Writer) {
	m, p := c.Measured, c.Params
	fmt.Fprintf(w, "measured: %s (%d bytes), %d Mbit/s links, %d cores, load %s; one node alone %.2fs\n", m.Size, m.Bytes, m.RateMbit, m.Cores, m.Load, m.AloneS)
	fmt.Fprintf(w, "  by: %s\n", m.Command)
	n := c.Rows[len(c.Rows)-1].Nodes
	fmt.Fprintf(w, "model: rate %.2f MB/s (the tbf rate x 1448/1514), machine %.0f MB/s (one node alone unshaped), contention %.2f (fitted on the roots' READY),\n",
		p.Rate/1e6, p.Machine/1e6, p.Contention)
	fmt.Fprintf(w, "  hop delay %v (fitted: %.0f ms per depth at %d nodes less a piece's %.0f ms), start %v, publish %v (measured median), open %v, listing %v + %v per peer\n",
		p.HopDelay.Round(time.Millisecond), c.Slope*1e3, n, float64(p.Layout.Pieces[0])/p.Rate*(1+p.Contention*float64(n)*p.Rate/p.Machine)*1e3,
		p.Start.Round(time.Millisecond), p.Publish.Round(time.Millisecond), p.Open, p.ListBase, p.ListPerPeer)
	fmt.Fprintf(w, "%5s | %-30s | %-30s | %s\n", "", "measured", "predicted", "error")
	fmt.Fprintf(w, "%5s | %6s %7s %7s %7s | %6s %7s %7s %7s | %6s %6s\n", "nodes", "copies", "p50 s", "p99 s", "max s", "copies", "p50 s", "p99 s", "max s", "p50", "p99")
	for _, r := range c.Rows {
		fmt.Fprintf(w, "%5d | %6.2f %7.2f %7.2f %7.2f | %6.2f %7.2f %7.2f %7.2f | %+5.1f%% %+5.1f%%\n", r.Nodes,
			r.MeasuredCopies, r.Measured[0], r.Measured[1], r.Measured[2], r.PredCopies, r.Predicted[0], r.Predicted[1], r.Predicted[2],
			100*(r.Predicted[0]-r.Measured[0])/r.Measured[0], 100*(r.Predicted[1]-r.Measured[1])/r.Measured[1])
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
