package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/stripes"
)

// The striped forest (stripes.Place), modelled piece by piece without a queue: each node places
// the fleet from the member list and opens one session per stripe, its stripe-s session open once
// its source there has the manifest (Setup at the root, then Open a level). The root takes the
// registry alone, at OriginRate, and passes a tensor on once it verified it whole; every other
// node (and the root too, with RootPieces) passes a piece on a hop's delay after it landed. A
// source's uplink is shared by the children it serves (the root's by its stripe heads), a node's
// downlink by its k stripes: a stripe's link runs at Rate over the larger of k and the source's
// children. A source sends a piece to its children of the stripe in turn, each copy at its
// uplink's whole rate, so its i-th child has a piece no sooner than i+1 pieces' times after the
// source did. A node that dies (or relays a bad piece, which its children catch and treat the same)
// leaves each of its children (of its stripe, and a relay's of another) to one re-attachment:
// RetryFirst and an Open later, to the first live node of stripes.Forest.Adopters, resuming from
// the pieces they verified; the adopter serves one more child from then. A root that dies
// (KillRoot) fails its sessions RootDetect later; then the next member of the rendezvous ranking
// (its successor, the head of stripe 0) leaves its fetch for the registry, which sends it every
// file it had not landed whole (a registry pull reuses whole files only), and the root's other
// orphans re-attach to it, RetryFirst and an Open later, as every orphan does; it serves them and
// its own children what it landed by then and what its pull lands. A slow node's
// uplink runs at SlowRate of Rate; with SlowAfter its children of its stripe notice it that long
// after the registry's setup and leave it for an adopter the same way.
// With Machine, every node's downlink is busy the whole rollout, so every link (the origin's too)
// runs as the chain's sends do at the machine's load of N links at Rate: slowed by 1 + Contention
// x that load, and at most an N-th of the machine.

// stripedRun is a striped rollout under way.
type stripedRun struct {
	p      Params
	f      *stripes.Forest
	k      int
	addr   []string
	index  map[string]int
	root   int
	deadAt []float64 // +Inf for a node that lives
	failAt []float64 // when its children leave it: its death, or a slow node's noticed slowness
	slow   []bool
	// per node: its pieces' stripes' sources over time (a source until it failed, then the adopter)
	segs [][][]segment // [node][stripe]
	// per node: changes of the children it serves (an adopted orphan +1, a dead child -1)
	load    [][]loadChange
	kids    []int          // children served at the start, every stripe together
	turns   map[[2]int]int // children a source has had in a stripe: [source, stripe]
	depth   [][]int
	orphans int
	// the root's death (Params.KillRoot): its successor (-1: the root lives) and when the root's
	// sessions fail (+Inf: never)
	succ int
	gone float64
}

// segment is a node's source of one stripe from an instant on.
type segment struct {
	from   float64 // the first byte may be asked for from then (the session open)
	source int
	turn   int // the node's place among the source's children of the stripe, from 0
}

// loadChange is a source's children changing by delta at t.
type loadChange struct {
	t     float64
	delta int
}

// runStriped simulates one rollout on the striped forest.
func runStriped(p Params) (*Result, error) {
	if m := p.Machine; m > 0 {
		load := float64(p.Nodes) * p.Rate / m
		slowed := min(p.Rate/(1+p.Contention*load), m/float64(p.Nodes)) / p.Rate
		p.Rate, p.OriginRate = p.Rate*slowed, p.OriginRate*slowed
	}
	r := &stripedRun{p: p, addr: make([]string, p.Nodes), index: make(map[string]int, p.Nodes)}
	for i := range r.addr {
		r.addr[i] = fmt.Sprintf("10.%d.%d.%d:7420", i>>16, i>>8&255, i&255)
		r.index[r.addr[i]] = i
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "sim %d", p.Seed))
	id, err := artifact.ParseIDHex(hex.EncodeToString(sum[:]))
	if err != nil {
		return nil, err
	}
	if r.f, err = stripes.Place(id, r.addr, p.Stripes); err != nil {
		return nil, err
	}
	r.k, r.root, r.succ, r.gone = r.f.Stripes(), r.index[r.f.Root()], -1, math.Inf(1)
	if p.KillRoot > 0 {
		if p.KillRoot > 1 || p.Nodes < 2 {
			return nil, errors.New("sim: KillRoot is a share of the root's pull, and the root's place needs another member")
		}
		r.succ = r.index[r.f.Ranking()[1]]
	}
	r.place()
	r.kill(rand.New(rand.NewPCG(p.Seed, 0x5eed)))
	return r.flow()
}

// place sets every node's first source and depth in each stripe, and the children each serves.
func (r *stripedRun) place() {
	n := r.p.Nodes
	r.segs, r.depth = make([][][]segment, n), make([][]int, n)
	r.turns = make(map[[2]int]int)
	r.load, r.kids, r.deadAt, r.failAt, r.slow = make([][]loadChange, n), make([]int, n), make([]float64, n), make([]float64, n), make([]bool, n)
	for i := range n {
		r.deadAt[i], r.failAt[i] = math.Inf(1), math.Inf(1)
		r.segs[i], r.depth[i] = make([][]segment, r.k), make([]int, r.k)
		if i == r.root {
			continue
		}
		for s := range r.k {
			d := r.f.Depth(r.addr[i], s)
			src := r.index[r.f.Parent(r.addr[i], s)]
			r.depth[i][s] = d
			r.segs[i][s] = []segment{{from: (r.p.Start + r.p.Setup).Seconds() + float64(d)*r.p.Open.Seconds(), source: src, turn: r.turn(src, s)}}
			r.kids[src]++
		}
	}
}

// kill picks the nodes that die (Params.Fail) and the slow ones (Params.Slow), never the root nor
// its successor, kills the root (Params.KillRoot), and re-attaches the orphans of each death and
// of each slow node its children notice, in the order their sources fail.
func (r *stripedRun) kill(rng *rand.Rand) {
	dying := int(math.Round(r.p.Fail * float64(r.p.Nodes)))
	slow := int(math.Round(r.p.Slow * float64(r.p.Nodes)))
	copyTime := float64(r.p.Layout.Bytes) / r.p.Rate
	var failing []int
	for _, i := range rng.Perm(r.p.Nodes) {
		switch {
		case i == r.root || i == r.succ:
		case dying > 0:
			dying--
			r.deadAt[i] = r.p.Start.Seconds() + copyTime*(0.1+0.8*rng.Float64())
			r.failAt[i] = r.deadAt[i]
			failing = append(failing, i)
		case slow > 0:
			slow--
			r.slow[i] = true
			if r.p.SlowAfter > 0 {
				r.failAt[i] = (r.p.Start + r.p.Setup + r.p.SlowAfter).Seconds()
				failing = append(failing, i)
			}
		}
	}
	failed := func(x int) float64 { return r.failAt[x] } // when x's children leave it
	if r.succ >= 0 {
		r.deadAt[r.root] = (r.p.Start + r.p.Setup).Seconds() + r.p.KillRoot*float64(r.p.Layout.Bytes)/r.p.OriginRate
		r.failAt[r.root], r.gone = r.deadAt[r.root], r.deadAt[r.root]+r.p.RootDetect.Seconds()
		failing = append(failing, r.root)
		failed = func(x int) float64 {
			if x == r.root {
				return r.gone
			}
			return r.failAt[x]
		}
	}
	slices.SortStableFunc(failing, func(a, b int) int { return cmpFloat(failed(a), failed(b)) })
	for _, x := range failing {
		t := failed(x)
		if r.deadAt[x] == t {
			for s := range r.k {
				if src := r.sourceAt(x, s, t); src >= 0 {
					r.load[src] = append(r.load[src], loadChange{t, -1})
				}
			}
		}
		if x == r.root { // its successor leaves its sources for the registry
			for s := range r.k {
				if src := r.sourceAt(r.succ, s, t); src >= 0 && src != r.root {
					r.load[src] = append(r.load[src], loadChange{t, -1})
				}
			}
		}
		for s := range r.k { // its stripe's children, and a relay's
			for c := range r.p.Nodes {
				if c == r.root || c == x || r.deadAt[c] <= t || r.sourceAt(c, s, t) != x || c == r.succ && t >= r.gone {
					continue
				}
				if a := r.adopter(c, x, s, t); a >= 0 {
					r.segs[c][s] = append(r.segs[c][s], segment{from: t + (RetryFirst + r.p.Open).Seconds(), source: a, turn: r.turn(a, s)})
					r.load[a] = append(r.load[a], loadChange{t, +1})
					r.orphans++
				}
			}
		}
	}
}

// adopter is the source c takes in stripe s when x failed there at t: the first of the forest's
// adopters still serving, else, the root dead, its successor (the ranking after the root); -1
// for none.
func (r *stripedRun) adopter(c, x, s int, t float64) int {
	for _, a := range r.f.Adopters(r.addr[c], r.addr[x], s) {
		if ai := r.index[a]; r.failAt[ai] > t {
			return ai
		}
	}
	if r.succ >= 0 && c != r.succ && r.deadAt[r.root] <= t {
		return r.succ
	}
	return -1
}

// turn is the place of src's next child of stripe s among its children there.
func (r *stripedRun) turn(src, s int) int {
	t := r.turns[[2]int{src, s}]
	r.turns[[2]int{src, s}]++
	return t
}

// sourceAt is c's source of stripe s at t, -1 for the root.
func (r *stripedRun) sourceAt(c, s int, t float64) int {
	segs := r.segs[c][s]
	if len(segs) == 0 {
		return -1
	}
	src := segs[0].source
	for _, g := range segs[1:] {
		if g.from-(RetryFirst+r.p.Open).Seconds() <= t {
			src = g.source
		}
	}
	return src
}

// upRate is src's uplink.
func (r *stripedRun) upRate(src int) float64 {
	if r.slow[src] {
		return r.p.Rate * r.p.SlowRate
	}
	return r.p.Rate
}

// linkRate is the rate of one child's stripe from src at t.
func (r *stripedRun) linkRate(src int, t float64) float64 {
	children := r.kids[src]
	for _, c := range r.load[src] {
		if c.t <= t {
			children += c.delta
		}
	}
	return r.upRate(src) / float64(max(children, r.k))
}

// flow moves the pieces and sums the rollout up. When the root dies, a first pass finds what its
// successor landed from its peers by the time it took the root's place, and a second moves the
// pieces with the successor serving those and what its registry pull lands (takeOver).
func (r *stripedRun) flow() (*Result, error) {
	n := r.p.Nodes
	res := &Result{Ready: make([]float64, n), Depth: make([]int, n), Copies: 1, Registry: 1}
	var held []float64
	var end float64
	if r.succ >= 0 {
		_, landed := r.pass(nil)
		var pulled int64
		held, end, pulled = r.takeOver(landed)
		res.Copies = r.p.KillRoot + float64(pulled)/float64(r.p.Layout.Bytes)
		res.Registry = 2
	}
	last, _ := r.pass(held)
	for i := range n {
		res.Depth[i] = slices.Max(r.depth[i])
		for _, segs := range r.segs[i] {
			if len(segs) > 0 {
				res.Formed = max(res.Formed, segs[0].from)
			}
		}
		if i == r.succ {
			last[i], res.Depth[i] = end, 0
		}
		if math.IsInf(r.deadAt[i], 1) {
			if math.IsInf(last[i], 1) {
				return nil, fmt.Errorf("sim: node %d never READY: every source of a stripe died", i)
			}
			res.Ready[i] = last[i] + r.p.Publish.Seconds()
			continue
		}
		res.Ready[i] = math.NaN()
		res.Dead++
	}
	res.Orphans = r.orphans
	return res, nil
}

// pass moves the pieces once: the root's from the registry, then each stripe down its tree, every
// source before the nodes it serves; it returns each node's last piece landed. Without held,
// nobody takes a stripe from the root's successor (what it will serve is not known yet), and it
// fetches from its peers as it does until the root's sessions fail: landed is when each piece
// landed there (+Inf: never). With held, the successor serves held and fetches nothing.
func (r *stripedRun) pass(held []float64) (last, landed []float64) {
	n, pieces := r.p.Nodes, r.p.Layout.Pieces
	hop := r.p.HopDelay.Seconds()
	taken := held != nil
	last = make([]float64, n) // each node's last piece landed
	// The root: the registry's payload in order, none of it after its death.
	verified, end, _ := r.pull((r.p.Start + r.p.Setup).Seconds(), nil)
	rootAvail := make([]float64, len(pieces))
	for j, v := range verified {
		rootAvail[j] = v + hop
		if v > r.deadAt[r.root] {
			rootAvail[j] = math.Inf(1)
		}
	}
	last[r.root] = end
	if !taken && r.succ >= 0 {
		landed = make([]float64, len(pieces))
	}
	// A piece of stripe s moves within stripe s alone: avail[i][q] is when node i serves the
	// stripe's q-th piece, piece s + q k (+Inf: never, it died first), for the stripe's sources
	// only, in buffers each stripe takes over from the one before.
	avail := make([][]float64, n)
	var free [][]float64
	buffer := func(m int) []float64 {
		if len(free) == 0 {
			return make([]float64, m, (len(pieces)+r.k-1)/r.k)
		}
		b := free[len(free)-1][:m]
		free = free[:len(free)-1]
		return b
	}
	for s := range r.k {
		for i, b := range avail {
			if b != nil {
				free, avail[i] = append(free, b), nil
			}
		}
		m := (len(pieces) - s + r.k - 1) / r.k // the stripe's pieces
		stripeOf := func(all []float64) []float64 {
			b := buffer(m)
			for q := range b {
				b[q] = all[s+q*r.k]
			}
			return b
		}
		avail[r.root] = stripeOf(rootAvail)
		if taken {
			avail[r.succ] = stripeOf(held)
		}
		order, serves := r.order(s, taken)
		for _, c := range order {
			// c serves stripe s to its children there: it is interior in it, a relay or an adopter
			if serves[c] {
				avail[c] = buffer(m)
			}
			segs := r.sources(c, s, taken)
			g := 0
			at := segs[0].from
			for q, j := 0, s; j < len(pieces); q, j = q+1, j+r.k { // piece j is stripe j mod k's
				var land float64
				for {
					src := segs[g].source
					start := max(at, avail[src][q])
					// its share of the source's uplink since its last piece, and its turn
					land = max(at+float64(pieces[j])/r.linkRate(src, start),
						avail[src][q]+float64(segs[g].turn+1)*float64(pieces[j])/r.upRate(src))
					if land <= r.failAt[src] {
						break
					}
					if g+1 == len(segs) {
						if land > r.deadAt[src] {
							land = math.Inf(1) // a dead source sends nothing more
						}
						break
					}
					g++ // the source failed before this piece landed: the next one
					at = max(at, segs[g].from)
				}
				if land > r.deadAt[c] {
					land = math.Inf(1)
				}
				at = land
				if serves[c] {
					avail[c][q] = land + hop
				}
				if landed != nil && c == r.succ {
					landed[j] = land
				}
			}
			last[c] = max(last[c], at)
		}
	}
	return last, landed
}

// pull is a registry pull, its payload asked for at t, of every piece not kept
// (nil: none kept), in order at OriginRate: when each is verified and may be passed on (a tensor
// once it landed whole, or each piece as it lands with RootPieces; +Inf for a kept one), when the
// last landed, and the bytes pulled.
func (r *stripedRun) pull(t float64, kept []bool) (verified []float64, end float64, bytes int64) {
	pieces := r.p.Layout.Pieces
	verified = make([]float64, len(pieces))
	first := 0
	for j, b := range pieces {
		if kept != nil && kept[j] {
			verified[j], first = math.Inf(1), j+1
			continue
		}
		t += float64(b) / r.p.OriginRate
		bytes += b
		if r.p.Layout.TensorEnd[j] || r.p.RootPieces {
			for q := first; q <= j; q++ {
				verified[q] = t
			}
			first = j + 1
		}
	}
	return verified, t, bytes
}

// takeOver is the root's successor once it took the root's place (at r.gone): it serves what it
// landed from its peers by then, and from a Setup later pulls from the registry every file it had
// not landed whole, again from its first byte (a registry pull reuses whole files only, oci's
// reuse). It returns when it serves each piece, when its pull ends, and the bytes it pulled.
func (r *stripedRun) takeOver(landed []float64) (held []float64, end float64, pulled int64) {
	l := r.p.Layout
	kept := make([]bool, len(l.Pieces))
	for first, j := 0, 0; j < len(l.Pieces); j++ {
		if !l.FileEnd[j] {
			continue
		}
		whole := slices.IndexFunc(landed[first:j+1], func(t float64) bool { return t > r.gone }) < 0
		for q := first; q <= j; q++ {
			kept[q] = whole
		}
		first = j + 1
	}
	verified, end, pulled := r.pull(r.gone+r.p.Setup.Seconds(), kept)
	held = make([]float64, len(l.Pieces))
	hop := r.p.HopDelay.Seconds()
	for j, v := range verified {
		if landed[j] <= r.gone {
			v = landed[j]
		}
		held[j] = v + hop
	}
	return held, end, pulled
}

// order is the nodes that fetch stripe s, each after every source it has there (every node but
// the root and, with taken, the root's successor, which serve what they have from the start),
// and which nodes are a source there.
func (r *stripedRun) order(s int, taken bool) ([]int, []bool) {
	n := r.p.Nodes
	waits := make([]int, n)
	served := make([][]int, n)
	next := []int{r.root}
	if taken {
		next = append(next, r.succ)
	}
	for c := range n {
		if c == r.root || taken && c == r.succ {
			continue
		}
		for _, g := range r.sources(c, s, taken) {
			waits[c]++
			served[g.source] = append(served[g.source], c)
		}
	}
	out, serves := make([]int, 0, n), make([]bool, n)
	for m, cs := range served {
		serves[m] = len(cs) > 0
	}
	for len(next) > 0 {
		m := next[0]
		next = next[1:]
		if m != r.root && !(taken && m == r.succ) {
			out = append(out, m)
		}
		for _, c := range served[m] {
			if waits[c]--; waits[c] == 0 {
				next = append(next, c)
			}
		}
	}
	return out, serves
}

// sources are c's sources of stripe s in turn; without taken, not the root's successor, whose
// pieces are not known yet (it is an orphan's last source: it never fails).
func (r *stripedRun) sources(c, s int, taken bool) []segment {
	segs := r.segs[c][s]
	if !taken && len(segs) > 1 && segs[len(segs)-1].source == r.succ {
		return segs[:len(segs)-1]
	}
	return segs
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
