package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// stripedResult is what TestStripedResults compares of one rollout: every node's time to READY
// (a dead node's as -1, JSON has no NaN), the origin's copies, the re-attachments, when the forest
// formed.
type stripedResult struct {
	Ready    []float64 `json:"ready"`
	Copies   float64   `json:"copies"`
	Registry int       `json:"registry"`
	Orphans  int       `json:"orphans"`
	Formed   float64   `json:"formed"`
}

// TestStripedResults: the striped forest's model gives the results recorded in
// testdata/striped-results.json, node by node, on small fleets with deaths, slow members, the
// machine's bound, the root passing on pieces and the root dying. A change to how the model computes (not what
// it models) keeps them; one that changes what it models writes them again
// (WEIGHTSNAP_SIM_UPDATE_RESULTS=1) and says why.
func TestStripedResults(t *testing.T) {
	l, err := SynthLayout(256<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	base := Params{Layout: l, Rate: 100e6, HopDelay: 2 * time.Millisecond, Open: 500 * time.Microsecond,
		Start: 50 * time.Millisecond, Setup: 100 * time.Millisecond, Publish: 300 * time.Millisecond, Seed: 3}
	cases := []struct {
		name string
		edit func(*Params)
	}{
		{"64 nodes", func(p *Params) { p.Nodes, p.Stripes = 64, 16 }},
		{"200 nodes, 5% die", func(p *Params) { p.Nodes, p.Stripes, p.Fail = 200, 8, 0.05 }},
		{"400 nodes, 2% die, root passes pieces", func(p *Params) { p.Nodes, p.Stripes, p.Fail, p.RootPieces = 400, 16, 0.02, true }},
		{"200 nodes, 5% slow, routed around", func(p *Params) {
			p.Nodes, p.Stripes, p.Slow, p.SlowRate, p.SlowAfter = 200, 8, 0.05, 0.1, 50*time.Millisecond
		}},
		{"200 nodes, 5% slow, kept", func(p *Params) { p.Nodes, p.Stripes, p.Slow, p.SlowRate = 200, 8, 0.05, 0.1 }},
		{"300 nodes, the machine's bound, 1% die", func(p *Params) {
			p.Nodes, p.Stripes, p.Machine, p.Contention, p.Fail = 300, 16, 4e9, 0.5, 0.01
		}},
		{"1000 nodes, 1% die, root passes pieces", func(p *Params) { p.Nodes, p.Stripes, p.Fail, p.RootPieces = 1000, 16, 0.01, true }},
		{"200 nodes, the root killed at 40%, 2% die", func(p *Params) { p.Nodes, p.Stripes, p.KillRoot, p.Fail = 200, 8, 0.4, 0.02 }},
		{"400 nodes, the root's host silent at 70%, root passes pieces", func(p *Params) {
			p.Nodes, p.Stripes, p.KillRoot, p.RootDetect, p.RootPieces = 400, 16, 0.7, SessionTimeout, true
		}},
	}
	got := map[string]stripedResult{}
	for _, tc := range cases {
		p := base
		tc.edit(&p)
		r, err := Run(p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := stripedResult{Ready: make([]float64, len(r.Ready)), Copies: r.Copies, Registry: r.Registry, Orphans: r.Orphans, Formed: r.Formed}
		for i, at := range r.Ready {
			s.Ready[i] = at
			if math.IsNaN(at) {
				s.Ready[i] = -1
			}
		}
		got[tc.name] = s
	}
	path := filepath.Join("testdata", "striped-results.json")
	if os.Getenv("WEIGHTSNAP_SIM_UPDATE_RESULTS") == "1" {
		b, err := json.MarshalIndent(got, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]stripedResult
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, w := got[tc.name], want[tc.name]
			if len(w.Ready) == 0 {
				t.Fatalf("%s has no recorded results", path)
			}
			if err := sameResult(g, w); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sameResult says how g differs from w, each time within a nanosecond's share of it.
func sameResult(g, w stripedResult) error {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	if len(g.Ready) != len(w.Ready) {
		return fmt.Errorf("%d nodes, recorded %d", len(g.Ready), len(w.Ready))
	}
	for i := range g.Ready {
		if !near(g.Ready[i], w.Ready[i]) {
			return fmt.Errorf("node %d READY at %.9fs, recorded %.9fs", i, g.Ready[i], w.Ready[i])
		}
	}
	if !near(g.Copies, w.Copies) || g.Registry != w.Registry || g.Orphans != w.Orphans || !near(g.Formed, w.Formed) {
		return fmt.Errorf("copies %.6f, registry %d, orphans %d, formed %.6fs; recorded %.6f, %d, %d, %.6fs",
			g.Copies, g.Registry, g.Orphans, g.Formed, w.Copies, w.Registry, w.Orphans, w.Formed)
	}
	return nil
}
