package sim

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// testParams is a small fleet at 100 MB/s on 64 MiB of the synthetic model, timings zero but a
// hop's.
func testParams(t *testing.T, nodes int) Params {
	t.Helper()
	l, err := SynthLayout(64<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	return Params{Nodes: nodes, Layout: l, Rate: 100e6, HopDelay: time.Millisecond, Open: 100 * time.Microsecond,
		ListBase: time.Millisecond, Seed: 1}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 8, 7, 6, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 8}, {0.99, 16}, {1, 16}, {0.01, 1}, {0.75, 12}} {
		if got := Quantile(xs, c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := Quantile([]float64{3, 1}, 0.5); got != 1 {
		t.Errorf("p50 of two = %v, want the first", got)
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("the quantile of nothing is a number")
	}
}

func TestLayout(t *testing.T) {
	l := TensorLayout([]int64{3 << 20, 100, blake3.PieceSize + 1})
	want := []int64{1 << 20, 1 << 20, 1 << 20, 100, blake3.PieceSize, 1}
	if !reflect.DeepEqual(l.Pieces, want) || !reflect.DeepEqual(l.TensorEnd, []bool{false, false, true, true, false, true}) ||
		!reflect.DeepEqual(l.FileEnd, []bool{false, false, false, false, false, true}) ||
		l.Bytes != 3<<20+100+blake3.PieceSize+1 || l.Largest != 3<<20 {
		t.Fatalf("layout %+v", l)
	}
	// The synthetic model's shards are its files: each ends on a tensor's last piece.
	s, err := SynthLayout(64<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for i, end := range s.FileEnd {
		if end {
			files++
			if !s.TensorEnd[i] {
				t.Fatalf("file %d ends at piece %d, inside a tensor", files, i)
			}
		}
	}
	if files != 4 || !s.FileEnd[len(s.FileEnd)-1] {
		t.Fatalf("%d files of 4 shards, the last piece ends one: %v", files, s.FileEnd[len(s.FileEnd)-1])
	}
}

// TestChain: every node takes one source; depths run 0..N-1; the root's child lags the root by
// its largest tensor, each hop below by a piece and a hop's delay; the origin sends one copy.
func TestChain(t *testing.T) {
	p := testParams(t, 8)
	// A first tensor long enough for every node to join before it lands at the root.
	p.Layout, p.Rate = TensorLayout([]int64{64 << 20, 8 << 20, 8 << 20}), 10e6
	r, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Copies < 0.999 || r.Copies > 1.001 || r.Registry != 1 {
		t.Fatalf("copies %.3f, registry %d: want one copy", r.Copies, r.Registry)
	}
	byDepth := make([]float64, p.Nodes)
	for i, d := range r.Depth {
		byDepth[d] = r.Ready[i]
	}
	piece := float64(blake3.PieceSize)/p.Rate + p.HopDelay.Seconds()
	if lag, want := byDepth[1]-byDepth[0], float64(p.Layout.Largest)/p.Rate; math.Abs(lag-want) > piece {
		t.Errorf("the root's child lags it %.3fs, want about its largest tensor's %.3fs", lag, want)
	}
	for d := 2; d < p.Nodes; d++ {
		if lag := byDepth[d] - byDepth[d-1]; math.Abs(lag-piece) > 1e-6 {
			t.Errorf("depth %d lags depth %d by %.4fs, want a piece and a hop, %.4fs", d, d-1, lag, piece)
		}
	}
}

// TestDeterministic: one seed, one result; another seed may differ.
func TestDeterministic(t *testing.T) {
	p := testParams(t, 32)
	p.Fail = 0.1
	a, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Depth, b.Depth) || !reflect.DeepEqual(a.Alive(), b.Alive()) || a.Copies != b.Copies {
		t.Fatal("two runs of one seed differ")
	}
}

// TestFaults: nodes that die mid-transfer leave every other node READY, their children resume
// elsewhere, and the origin sends at most a copy more per death.
func TestFaults(t *testing.T) {
	for _, c := range []struct {
		name  string
		nodes int
		fail  float64
		roots int
	}{
		{"chain", 64, 0.05, 1},
		{"forest", 64, 0.05, 4},
		{"half die", 16, 0.5, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testParams(t, c.nodes)
			p.Fail, p.Roots, p.OriginRate = c.fail, c.roots, float64(c.roots)*p.Rate
			r, err := Run(p)
			if err != nil {
				t.Fatal(err)
			}
			if want := int(math.Round(c.fail * float64(c.nodes))); r.Dead != want {
				t.Fatalf("%d dead, want %d", r.Dead, want)
			}
			if len(r.Alive()) != c.nodes-r.Dead {
				t.Fatalf("%d READY of %d alive", len(r.Alive()), c.nodes-r.Dead)
			}
			if r.Orphans == 0 {
				t.Error("no death left an orphan")
			}
			if r.Copies > float64(c.roots+r.Dead)+0.01 {
				t.Errorf("the origin sent %.2f copies for %d roots and %d deaths", r.Copies, c.roots, r.Dead)
			}
		})
	}
}

// TestRootWait: when no builder takes a child (no slot at depth 0), every node takes the registry,
// the root at once and the others after their rounds of asks, each answered busy: none before
// 2 x RootWait (the round past busy follows the first); each is a copy.
func TestRootWait(t *testing.T) {
	p := testParams(t, 4)
	p.FanOut, p.Rate = []int{0}, 4e6 // a copy takes longer than the rounds: the root holds nothing before
	r, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Registry != p.Nodes || r.Copies < float64(p.Nodes)-0.01 {
		t.Fatalf("%d nodes took the registry, %.2f copies: want all %d", r.Registry, r.Copies, p.Nodes)
	}
	copyTime := float64(p.Layout.Bytes) / p.Rate
	first := Quantile(r.Ready, 0)
	for i, d := range r.Ready {
		if d != first && d < 2*RootWait.Seconds()+copyTime {
			t.Errorf("node %d READY at %.2fs: it took the registry before 2 x RootWait", i, d)
		}
	}
}

// TestForest: with k roots the origin sends k copies and the chains are k times shorter.
func TestForest(t *testing.T) {
	p := testParams(t, 64)
	p.Roots, p.OriginRate = 4, 4*p.Rate
	r, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	deepest := 0
	for _, d := range r.Depth {
		deepest = max(deepest, d)
	}
	if r.Registry != 4 || math.Abs(r.Copies-4) > 0.01 || deepest > 64/4 {
		t.Fatalf("registry %d, copies %.2f, deepest %d: want 4 roots, 4 copies, chains of 16", r.Registry, r.Copies, deepest)
	}
}

// TestFanOut: a tree of chains with fan-out 2 at the root and shallowest-first choice: the root
// has two children, each receiving at half the rate, so the last node takes about twice a copy.
func TestFanOut(t *testing.T) {
	p := testParams(t, 16)
	p.FanOut, p.Shallowest = []int{2}, true
	r, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	ones := 0
	for _, d := range r.Depth {
		if d == 1 {
			ones++
		}
	}
	copyTime := float64(p.Layout.Bytes) / p.Rate
	if last := Quantile(r.Ready, 1); ones != 2 || last < 1.9*copyTime {
		t.Fatalf("%d nodes at depth 1, the last READY at %.2fs: want 2, and about twice %.2fs", ones, last, copyTime)
	}
}
