package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/peer/stripes"
)

// slowSourceRateMbit is the slow-source test's link rate: low, so a
// transfer lasts many of the rule's windows, as on the links where a rule
// on unit shares misfired.
const slowSourceRateMbit = 25

// slowSourceSeconds is the rule's window in the slow-source test.
const slowSourceSeconds = 2

// TestFleetForestSlowSource: eight nodes start together in the forest with
// the slow-source rule on. Where every link has one rate, no stripe leaves
// its source as slow. Where one member's uplink runs at a tenth of the
// others' (of the first stripe's interior below its head, the one with the
// most children there), each of its children there re-attaches as slow, or
// asks a second source for the stripe's tail (the endgame), to a member
// that does not take the stripe through it, the slow member sends
// less than its children's share of the stripe, every node is READY with
// exact bytes, and the origin sends about one copy.
func TestFleetForestSlowSource(t *testing.T) {
	const nodes = 8
	f := Start(t, Options{Nodes: nodes, Size: "64MiB", Shards: 2, RateMbit: slowSourceRateMbit})
	forest := f.forest(t, f.nodes[:nodes])
	// The slow member: of stripe 0's interior below its head, the one with
	// the most children there.
	var slow string
	var children []string
	for _, m := range forest.Ranking()[1+forest.Stripes():] {
		if forest.Interior(m) != 0 {
			continue
		}
		var cs []string
		for _, n := range f.nodes[:nodes] {
			if forest.Parent(n.addr, 0) == m {
				cs = append(cs, n.addr)
			}
		}
		if len(cs) > len(children) {
			slow, children = m, cs
		}
	}
	if len(children) == 0 {
		t.Fatal("no member below stripe 0's head is a source of stripe 0")
	}
	slowNode := slices.IndexFunc(f.nodes, func(n *node) bool { return n.addr == slow })
	for _, tc := range []struct {
		name     string
		throttle bool
	}{
		{"every link at one rate", false},
		{"one uplink at a tenth", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.Shape(slowSourceRateMbit)
			if tc.throttle {
				f.shapeUplink(f.nodes[slowNode], slowSourceRateMbit/10)
			}
			sentBefore := f.txBytes(f.nodes[slowNode])
			ro := f.Launch(Round{Nodes: nodes, Peers: true, Structure: "forest", SlowSource: slowSourceSeconds})
			r := ro.Wait()
			sent := f.txBytes(f.nodes[slowNode]) - sentBefore
			var left []string // the slow re-attachments
			for i, p := range ro.Procs {
				if l := logLine(t, p.Log, "re-attaching", "reason=slow"); l != "" {
					left = append(left, fmt.Sprintf("node %d: %s", i, l))
				}
			}
			t.Logf("%s: %d slow re-attachments; %s sent %d MiB; the origin sent %.2f copies; last READY %.2fs; sources %v\n%s",
				tc.name, len(left), slow, sent>>20, r.Copies, r.Last.Seconds(), r.Sources, strings.Join(left, "\n"))
			if r.Copies > forestMaxCopies {
				t.Fatalf("the origin sent %.2f copies, more than %.2f", r.Copies, forestMaxCopies)
			}
			if !tc.throttle {
				if len(left) > 0 {
					t.Fatalf("every link at one rate, and %d nodes left a source as slow", len(left))
				}
				return
			}
			adopted := 0
			for _, c := range children {
				i := slices.IndexFunc(ro.Nodes, func(n *node) bool { return n.addr == c })
				// A child leaves the slow member, or takes the stripe's tail
				// from a second source (the endgame) before the rule's time
				// is up.
				l := logLine(t, ro.Procs[i].Log, "re-attaching", "reason=slow", `peer="`+slow+`"`)
				key := `adopter="`
				if l == "" {
					l, key = logLine(t, ro.Procs[i].Log, "asking a second source", "stripe=0/"), `peer="`
				}
				if l == "" {
					continue
				}
				_, a, _ := strings.Cut(l, key)
				a, _, _ = strings.Cut(a, `"`)
				if a == slow || a == c || below(forest, a, slow, 0) {
					t.Fatalf("node %s left %s for %s, which takes stripe 0 through it: %s", c, slow, a, l)
				}
				adopted++
			}
			if adopted != len(children) {
				t.Fatalf("%s's uplink runs at a tenth, and %d of its children in stripe 0 %v left it as slow or took a second source", slow, adopted, children)
			}
			share := int64(len(children)) * f.Bytes / int64(forest.Stripes())
			if sent >= share {
				t.Fatalf("%s sent %d bytes, not less than its %d children's share of stripe 0, %d bytes", slow, sent, len(children), share)
			}
		})
	}
}

// below says whether m takes stripe s through src in forest.
func below(forest *stripes.Forest, m, src string, s int) bool {
	for p := forest.Parent(m, s); p != ""; p = forest.Parent(p, s) {
		if p == src {
			return true
		}
	}
	return false
}

// shapeUplink sets n's uplink (its own end's egress) to rateMbit Mbit/s.
func (f *Fleet) shapeUplink(n *node, rateMbit int) {
	f.t.Helper()
	for _, e := range f.ends {
		if e.ns != n.ns.Name {
			continue
		}
		f.shapeEnd(e, rateMbit)
	}
}

// txBytes is the bytes n's interface has sent.
func (f *Fleet) txBytes(n *node) int64 {
	f.t.Helper()
	for _, e := range f.ends {
		if e.ns != n.ns.Name {
			continue
		}
		return f.tx(n.ns, e.dev)
	}
	f.t.Fatalf("no link of %s", n.addr)
	return 0
}
