package sim

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// TestStriped: on the striped forest one node takes the registry, every node is READY, no node
// beats one link's time for the artifact, the depth stays within log_k of the fleet, and a node
// that dies costs each of its children of its stripe one re-attachment.
func TestStriped(t *testing.T) {
	for _, tc := range []struct {
		nodes, stripes int
		fail           float64
	}{{2, 16, 0}, {9, 4, 0}, {64, 16, 0}, {200, 8, 0}, {200, 8, 0.05}, {400, 16, 0.02}} {
		t.Run(fmt.Sprintf("nodes=%d/stripes=%d/fail=%v", tc.nodes, tc.stripes, tc.fail), func(t *testing.T) {
			p := testParams(t, tc.nodes)
			p.Stripes, p.Fail = tc.stripes, tc.fail
			r, err := Run(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.Copies != 1 || r.Registry != 1 {
				t.Fatalf("copies %.3f, registry %d: want one copy", r.Copies, r.Registry)
			}
			oneLink := float64(p.Layout.Bytes) / p.Rate
			k := min(tc.stripes, int(math.Sqrt(float64(tc.nodes-1))))
			maxDepth := 2 + int(math.Ceil(math.Log(float64(tc.nodes)/float64(max(k, 1)))/math.Log(float64(max(k, 2)))))
			for i, at := range r.Ready {
				if math.IsNaN(at) {
					continue
				}
				if at < oneLink*(1-1e-9) {
					t.Fatalf("node %d READY at %.3fs, before one link's %.3fs", i, at, oneLink)
				}
				if k > 1 && r.Depth[i] > maxDepth {
					t.Fatalf("node %d at depth %d, want at most %d", i, r.Depth[i], maxDepth)
				}
			}
			if want := int(math.Round(tc.fail * float64(tc.nodes))); r.Dead != want {
				t.Fatalf("%d dead, want %d", r.Dead, want)
			}
			if r.Dead > 0 && (r.Orphans == 0 || r.Orphans > r.Dead*(k+2)) {
				t.Fatalf("%d re-attachments for %d dead, want one per child of each (at most %d)", r.Orphans, r.Dead, r.Dead*(k+2))
			}
		})
	}
}

// TestStripedPieceRoot: a root that passes on pieces as they land brings the median node nearer
// one link's time than a root that passes on whole tensors.
func TestStripedPieceRoot(t *testing.T) {
	p := testParams(t, 17)
	p.Stripes, p.Layout = 4, TensorLayout([]int64{48 << 20, 8 << 20, 8 << 20})
	tensors, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	p.RootPieces = true
	pieces, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := Quantile(pieces.Alive(), 0.5), Quantile(tensors.Alive(), 0.5); a >= b {
		t.Fatalf("the median node READY at %.3fs with pieces from the root, %.3fs with tensors", a, b)
	}
}

// TestStripedSlowRoutedAround: slow sources whose children leave them for adopters hold the last
// node back less than slow sources whose children stay.
func TestStripedSlowRoutedAround(t *testing.T) {
	p := testParams(t, 200)
	p.Stripes, p.Slow, p.SlowRate = 8, 0.05, 0.1
	stay, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	p.SlowAfter = 50 * time.Millisecond
	leave, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	if leave.Orphans == 0 {
		t.Fatal("no node left a slow source")
	}
	if a, b := Quantile(leave.Alive(), 1), Quantile(stay.Alive(), 1); a >= b {
		t.Fatalf("the last node READY at %.3fs routed around slow sources, %.3fs staying with them", a, b)
	}
}

// TestStripedFormed: with the join's measured costs, a striped forest of Kraken's 2,600 nodes,
// and of 10,000, is formed (every node placed, each of its sessions open) within about a second
// of the start, and later than its deepest hop's opens after the root's registry setup.
func TestStripedFormed(t *testing.T) {
	for _, nodes := range []int{64, KrakenNodes, 10000} {
		t.Run(fmt.Sprint("nodes=", nodes), func(t *testing.T) {
			p := MeasuredJoin(Datacenter())
			p.Nodes, p.Layout, p.Rate, p.Stripes, p.Seed = nodes, testParams(t, nodes).Layout, KrakenRate, 16, 1
			r, err := Run(p)
			if err != nil {
				t.Fatal(err)
			}
			deepest := slices.Max(r.Depth)
			if least := (p.Start + p.Setup + time.Duration(deepest)*p.Open).Seconds(); r.Formed < least-1e-9 {
				t.Fatalf("formed at %.3fs, before the deepest hop's opens (depth %d) at %.3fs", r.Formed, deepest, least)
			}
			if r.Formed > 1 {
				t.Fatalf("formed at %.3fs, past a second", r.Formed)
			}
		})
	}
}
