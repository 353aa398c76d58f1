// Package stripes computes a fleet placed for one artifact from its member
// list alone: the rendezvous ranking that agrees on a root, and the striped
// forest that carries the artifact from the root to every member.
package stripes

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// The striped forest: an artifact's pieces are dealt to k stripes (piece i
// of the artifact's piece order to stripe i mod k), and each stripe goes
// down its own tree. Every node places the fleet by itself from the member
// list (the configured peers or a DNS name's addresses, and itself): the
// rendezvous ranking of the members for the artifact puts the root first,
// the root alone takes the registry, and the ranking's other nodes are
// dealt to the stripes in turn (rank r > 0 to stripe (r-1) mod k). A
// stripe's own nodes are its interior, a k-ary heap under the root; every
// other node is a leaf of that stripe, on the shallowest interior node with
// a free slot. A stripe with fewer interior nodes than the others has
// fewer free slots than leaves; its last leaves take the stripe from a
// leaf of it whose own stripe has a slot to spare (a relay), one hop
// deeper. Each node is interior in one stripe and a leaf in the
// others, so its uplink carries one artifact's worth (k children of one
// stripe), its downlink k stripes from k parents, and a stripe's depth is
// about log_k of the fleet. A node opens one session per stripe and asks
// nobody where to go.

// DefaultStripes is how many stripes a striped forest deals an artifact to
// when the configuration does not say.
const DefaultStripes = 16

// Forest is the striped structure of one artifact over a member list.
type Forest struct {
	stripes int
	order   []string        // the rendezvous ranking: the root first
	rank    map[string]int  // a member's place in order
	relay   map[leaf]string // the source of a leaf past its stripe's free slots
}

// leaf is a member as a leaf of one stripe.
type leaf struct {
	stripe int
	member string
}

// Place places members (duplicates counted once) for id in a forest
// of at most stripes stripes, and no more than the square root of the
// members other than the root: a stripe then has at least as many interior
// nodes as stripes, and, with the relays, no member but the root serves
// more children than there are stripes.
func Place(id artifact.ID, members []string, stripes int) (*Forest, error) {
	if stripes < 1 {
		return nil, fmt.Errorf("striped forest of %d stripes: %w", stripes, errdefs.ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(members))
	var uniq []string
	for _, m := range members {
		if !seen[m] {
			seen[m] = true
			uniq = append(uniq, m)
		}
	}
	if len(uniq) == 0 {
		return nil, fmt.Errorf("striped forest of no members: %w", errdefs.ErrInvalidArgument)
	}
	f := &Forest{stripes: max(1, min(stripes, isqrt(len(uniq)-1))), order: Rank(id, uniq), rank: make(map[string]int, len(uniq))}
	for r, m := range f.order {
		f.rank[m] = r
	}
	f.relay = f.relays()
	return f, nil
}

// relays gives each leaf past its stripe's free slots a relay: a leaf of
// that stripe interior in another, with a slot its own stripe has to spare
// (its first slots), the stripes and their slots taken in order. A relay of a stripe is never
// past that stripe's free slots itself, so its source there is interior.
// A leaf left without one hangs on its stripe's deepest interior nodes.
func (f *Forest) relays() map[leaf]string {
	k := f.stripes
	if k == 1 {
		return nil
	}
	var spare []string // a member per slot to spare
	var over []leaf
	for s := range k {
		m := f.interiorCount(s)
		full, free, slots := f.slots(s)
		leaves := len(f.order) - 1 - m
		for i := range slots - leaves {
			p := full
			if i >= free {
				p = full + 1 + (i-free)/k
			}
			spare = append(spare, f.interiorAt(s, p))
		}
		for q := slots; q < leaves; q++ {
			over = append(over, leaf{s, f.leafAt(s, q)})
		}
	}
	isOver := make(map[leaf]bool, len(over))
	for _, l := range over {
		isOver[l] = true
	}
	relay := make(map[leaf]string, len(over))
	used := make([]bool, len(spare))
	for _, l := range over {
		for j, m := range spare {
			if !used[j] && m != l.member && !isOver[leaf{l.stripe, m}] {
				relay[l], used[j] = m, true
				break
			}
		}
	}
	return relay
}

// Stripes is the forest's stripe count.
func (f *Forest) Stripes() int { return f.stripes }

// Root is the member that takes the registry.
func (f *Forest) Root() string { return f.order[0] }

// Ranking is the rendezvous ranking of the members, the root first: when
// the root is gone, the first live member after it takes its place.
func (f *Forest) Ranking() []string { return slices.Clone(f.order) }

// Interior is the stripe member is interior in, -1 for the root.
func (f *Forest) Interior(member string) int {
	r, ok := f.rank[member]
	if !ok || r == 0 {
		return -1
	}
	return (r - 1) % f.stripes
}

// Parent is member's source of stripe s: "" for the root (its source is
// the registry) and for a name that is no member.
func (f *Forest) Parent(member string, s int) string {
	r, ok := f.rank[member]
	if !ok || r == 0 {
		return ""
	}
	k := f.stripes
	if (r-1)%k == s {
		p := (r - 1) / k
		if p == 0 {
			return f.order[0]
		}
		return f.interiorAt(s, (p-1)/k)
	}
	if src, ok := f.relay[leaf{s, member}]; ok {
		return src
	}
	return f.interiorAt(s, f.leafSlot(s, f.leafIndex(r, s)))
}

// Depth is member's hops from the root in stripe s (the root's own: 0).
func (f *Forest) Depth(member string, s int) int {
	d := 0
	for m := member; m != f.order[0]; m = f.Parent(m, s) {
		if m == "" {
			return -1
		}
		d++
	}
	return d
}

// Adopters are the sources, in the order to try, an orphan of stripe s
// takes when its source there failed (died, or served a bad piece). Below
// the stripe's head they are the interior nodes of the stripe at the
// failed one's level, beginning at one the orphan's rank picks (so the
// orphans spread over them, one more child each), then the failed one's
// own source. When the head failed, its first heap child takes its place
// under the root, and the head's other orphans spread over that one's
// children, then that one, then the root. The failed one and the orphan
// are not among them. An orphan of a relay goes to the relay's source.
func (f *Forest) Adopters(orphan, failed string, s int) []string {
	r, ok := f.rank[failed]
	if !ok || r == 0 {
		return nil
	}
	if (r-1)%f.stripes != s {
		return []string{f.Parent(failed, s)}
	}
	k := f.stripes
	p := (r - 1) / k
	start := f.childIndex(orphan, failed, s)
	var out []string
	// spread appends the interior positions lo..hi of stripe s, beginning
	// at the orphan's pick, all but skip and the orphan.
	spread := func(lo, hi, skip int) {
		hi = min(hi, f.interiorCount(s)-1)
		width := hi - lo + 1
		for i := range max(width, 0) {
			q := lo + (start+i)%width
			if m := f.interiorAt(s, q); q != skip && m != orphan {
				out = append(out, m)
			}
		}
	}
	if p > 0 {
		lo, hi := levelSpan(p, k)
		spread(lo, hi, p)
		return append(out, f.Parent(failed, s))
	}
	if f.interiorCount(s) < 2 || f.interiorAt(s, 1) == orphan {
		return []string{f.order[0]}
	}
	spread(k+1, 2*k, -1)
	return append(out, f.interiorAt(s, 1), f.order[0])
}

// childIndex is orphan's place among the members whose source of stripe s
// is failed, in rank order.
func (f *Forest) childIndex(orphan, failed string, s int) int {
	r, ok := f.rank[orphan]
	if !ok {
		return 0
	}
	i := 0
	for _, m := range f.order[1:r] {
		if f.Parent(m, s) == failed {
			i++
		}
	}
	return i
}

// levelSpan is the first and last heap position of position p's level in
// a k-ary heap.
func levelSpan(p, k int) (lo, hi int) {
	lo, width := 0, 1
	for p >= lo+width {
		lo += width
		width *= k
	}
	return lo, lo + width - 1
}

// interiorCount is how many members are interior in stripe s.
func (f *Forest) interiorCount(s int) int {
	n := len(f.order) - 1 // the members but the root
	return (n - s + f.stripes - 1) / f.stripes
}

// interiorAt is the member at heap position p of stripe s's interior.
func (f *Forest) interiorAt(s, p int) string { return f.order[1+s+p*f.stripes] }

// leafIndex is rank r's place among the leaves of stripe s (the members
// other than the root and the stripe's interior, in rank order).
func (f *Forest) leafIndex(r, s int) int {
	k := f.stripes
	before := r - 1 // members ranked between the root and r
	return before - (before-s+k-1)/k
}

// leafAt is the member that is leaf q of stripe s (k > 1).
func (f *Forest) leafAt(s, q int) string {
	k := f.stripes
	i := q % (k - 1)
	x := q/(k-1)*k + i
	if i >= s {
		x++
	}
	return f.order[1+x]
}

// slots are stripe s's interior's slots for leaves (k children in all,
// heap children first): full is the positions whose slots are all heap
// children, free position full's slots for leaves, all every slot for
// leaves.
func (f *Forest) slots(s int) (full, free, all int) {
	k, m := f.stripes, f.interiorCount(s)
	full = (m - 1) / k
	free = k - (m - 1 - k*full)
	return full, free, free + k*(m-1-full)
}

// leafSlot is the heap position of stripe s's interior that leaf q hangs
// on: the shallowest with a free slot, but for the first slots a stripe
// with more slots than leaves has to spare (its relays'), and past the last
// free slot in turn from the deepest.
func (f *Forest) leafSlot(s, q int) int {
	full, free, all := f.slots(s)
	q += max(0, all-(len(f.order)-1-f.interiorCount(s)))
	if q < free {
		return full
	}
	m := f.interiorCount(s)
	if p := full + 1 + (q-free)/f.stripes; p < m {
		return p
	}
	return m - 1 - (q-all)%m
}

// isqrt is the integer square root of n >= 0.
func isqrt(n int) int {
	r := int(math.Sqrt(float64(n)))
	for r*r > n {
		r--
	}
	for (r+1)*(r+1) <= n {
		r++
	}
	return r
}

// Rank ranks addrs for id by rendezvous hashing, highest random weight
// first: every node that ranks the same addresses for the same artifact
// gets the same order.
func Rank(id artifact.ID, addrs []string) []string {
	score := func(addr string) uint64 {
		h := sha256.New()
		h.Write([]byte(id.String()))
		h.Write([]byte{0})
		h.Write([]byte(addr))
		return binary.BigEndian.Uint64(h.Sum(nil))
	}
	out := slices.Clone(addrs)
	slices.SortFunc(out, func(a, b string) int {
		sa, sb := score(a), score(b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return out
}
