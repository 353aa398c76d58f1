package stripes

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
)

// members is n made-up member addresses.
func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.%d.%d:7420", i/250, i%250)
	}
	return out
}

func TestPlace(t *testing.T) {
	id := artifact.MustParseID("sha256:" + strings.Repeat("4f", 32))
	for _, tc := range []struct{ nodes, stripes, wantStripes int }{
		{1, 16, 1}, {2, 16, 1}, {3, 16, 1}, {17, 16, 4}, {64, 16, 7}, {100, 4, 4}, {2600, 16, 16}, {333, 1, 1},
	} {
		t.Run(fmt.Sprintf("nodes=%d/stripes=%d", tc.nodes, tc.stripes), func(t *testing.T) {
			ms := members(tc.nodes)
			f, err := Place(id, ms, tc.stripes)
			if err != nil {
				t.Fatal(err)
			}
			k := f.Stripes()
			if k != tc.wantStripes {
				t.Fatalf("%d stripes, want %d", k, tc.wantStripes)
			}
			// The same forest whatever order the members are listed in.
			rev := slices.Clone(ms)
			slices.Reverse(rev)
			g, err := Place(id, append(rev, ms[0]), tc.stripes)
			if err != nil {
				t.Fatal(err)
			}
			if f.Root() != g.Root() {
				t.Fatalf("root %s, reversed %s", f.Root(), g.Root())
			}
			// The deepest a stripe may be: the interior heap of n/k nodes, the root above, a leaf and its relayed leaf below.
			n := float64(tc.nodes)
			maxDepth := 3 + int(math.Ceil(math.Log(max(n/float64(k), 1))/math.Log(float64(max(k, 2)))))
			if k == 1 {
				maxDepth = tc.nodes
			}
			children := map[string]int{}
			for _, m := range ms {
				if m == f.Root() {
					if f.Interior(m) != -1 {
						t.Fatalf("the root is interior in stripe %d", f.Interior(m))
					}
					continue
				}
				for s := range k {
					p := f.Parent(m, s)
					if p == "" || p == m {
						t.Fatalf("%s has source %q in stripe %d", m, p, s)
					}
					if g.Parent(m, s) != p {
						t.Fatalf("%s stripe %d: source %s, reversed %s", m, s, p, g.Parent(m, s))
					}
					// A source is the root, interior in the stripe, or a relay: a leaf
					// whose own source is interior in it.
					if p != f.Root() && f.Interior(p) != s && f.Interior(f.Parent(p, s)) != s {
						t.Fatalf("%s's source in stripe %d is %s, interior in stripe %d, its source %s", m, s, p, f.Interior(p), f.Parent(p, s))
					}
					if d := f.Depth(m, s); d < 1 || d > maxDepth {
						t.Fatalf("%s at depth %d in stripe %d, want 1..%d", m, d, s, maxDepth)
					}
					children[p]++
				}
			}
			for p, c := range children {
				if p != f.Root() && c > k {
					t.Fatalf("%s serves %d children, want at most %d", p, c, k)
				}
			}
		})
	}
}

func TestStripeAdopters(t *testing.T) {
	id := artifact.MustParseID("sha256:" + strings.Repeat("7a", 32))
	ms := members(300)
	f, err := Place(id, ms, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, failed := range ms {
		s := f.Interior(failed)
		if s < 0 {
			continue
		}
		head := f.Parent(failed, s) == f.Root()
		for _, orphan := range ms {
			if orphan == failed || f.Parent(orphan, s) != failed {
				continue
			}
			ads := f.Adopters(orphan, failed, s)
			if len(ads) == 0 || slices.Contains(ads, failed) || slices.Contains(ads, orphan) {
				t.Fatalf("%s's adopters after %s: %v", orphan, failed, ads)
			}
			for _, a := range ads {
				// An adopter is never below the orphan: the stripe stays a tree.
				for m := a; m != f.Root(); m = f.Parent(m, s) {
					if m == orphan {
						t.Fatalf("%s's adopter %s after %s is below it", orphan, a, failed)
					}
				}
				if a != f.Root() && f.Interior(a) != s {
					t.Fatalf("%s's adopter %s after %s is interior in %d, want %d", orphan, a, failed, f.Interior(a), s)
				}
				if !head && a != f.Parent(failed, s) && f.Depth(a, s) != f.Depth(failed, s) {
					t.Fatalf("%s's adopter %s after %s at depth %d, want %d", orphan, a, failed, f.Depth(a, s), f.Depth(failed, s))
				}
			}
			if last := ads[len(ads)-1]; !head && last != f.Parent(failed, s) || head && last != f.Root() {
				t.Fatalf("%s's adopters after %s end with %s", orphan, failed, last)
			}
		}
	}
	if len(f.relay) == 0 {
		t.Fatal("no relays in a fleet whose stripes have unequal interiors")
	}
	for l, relay := range f.relay {
		if ads := f.Adopters(l.member, relay, l.stripe); !slices.Equal(ads, []string{f.Parent(relay, l.stripe)}) {
			t.Fatalf("%s's adopters after its relay %s of stripe %d: %v, want the relay's source", l.member, relay, l.stripe, ads)
		}
	}
}
