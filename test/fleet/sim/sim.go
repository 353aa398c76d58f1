package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Params are one rollout: the fleet, its links, the artifact, the protocol's knobs and the
// timings the protocol does not fix (calibrated on a measurement, or assumed for another setting).
type Params struct {
	Nodes  int
	Layout Layout
	// Rate is every node's link goodput each way, payload bytes per second; OriginRate the
	// origin's uplink (0: Rate), shared in turn by the nodes pulling from it.
	Rate, OriginRate float64
	// Machine, when set, is the bytes per second one machine's CPUs move at most (one node
	// alone, unshaped, measures it): a benchmark's fleet shares them. All links together move at
	// most Machine, and with Contention each send is slowed by 1 + Contention x the machine's
	// load (the pieces on the wire at the link's rate over Machine): a node not scheduled when
	// its bytes land leaves its link idle. Real hosts: 0.
	// The striped forest takes the load of every node's link busy (striped.go).
	Machine, Contention float64
	// MaxChildren is [peer] max_children (0: DefaultMaxChildren). FanOut, when set, overrides it
	// by depth (FanOut[d] for a builder at depth d, past its end MaxChildren): a tree of chains.
	MaxChildren int
	FanOut      []int
	// Shallowest ranks free builders by depth before children (the protocol ranks by children
	// first, so a new node takes the tail of the chain): with FanOut, the tree fills its top first.
	Shallowest bool
	// Roots is how many nodes of the rendezvous ranking take the registry at once (0: 1, the
	// protocol's); more is a forest of chains, one origin copy each (the origin's uplink must
	// carry them: OriginRate).
	Roots int
	// Stripes, when set, is the striped forest's stripe count (stripes.Place): the rollout runs
	// on that forest (striped.go) instead of the chain, and MaxChildren, FanOut,
	// Shallowest, Roots and the listing are not used.
	Stripes int
	// RootPieces says the origin's index carries each piece's chaining values, so the striped
	// forest's root verifies and passes on a piece as it lands, not a tensor once it landed whole.
	RootPieces bool

	Start    time.Duration // process start to the first listing
	Setup    time.Duration // a registry pull's manifest, index and headers, before the first payload byte
	Publish  time.Duration // the last payload byte to READY (the store's publication, the exit)
	HopDelay time.Duration // a piece verified at one node to its first byte on the wire to a child
	Open     time.Duration // opening (or being refused) one session
	// ListBase and ListPerPeer make a listing round's time: ListBase + ListPerPeer per peer, at
	// most ListTimeout.
	ListBase, ListPerPeer time.Duration

	// Fail is the fraction of nodes that die (their processes killed: sessions drop at once) at a
	// uniform instant within the middle 80% of one copy's time on a link.
	Fail float64
	// Slow is the fraction of nodes whose uplink runs at SlowRate times Rate (striped forest
	// only); with SlowAfter, their children of their stripe leave them for an adopter that long
	// after the registry's setup (a slow source routed around), without it they stay.
	Slow, SlowRate float64
	SlowAfter      time.Duration
	// KillRoot, when set, is the share of the artifact the striped forest's root has pulled from
	// the registry when it dies (0: it lives). RootDetect is how long after its death its
	// sessions fail: 0 when its process is killed (its kernel resets them), SessionTimeout when
	// its host goes silent. Then the next member of the rendezvous ranking takes its place
	// (striped.go).
	KillRoot   float64
	RootDetect time.Duration
	Seed       uint64
}

// Result is a rollout's outcome.
type Result struct {
	Ready    []float64 // each node's seconds from the common start to READY; NaN for a dead node
	Depth    []int     // each node's depth at its end (0: from the registry)
	Copies   float64   // origin payload bytes over the artifact's
	Registry int       // nodes that took the registry (the root included)
	Dead     int
	Orphans  int // sessions lost to a dead source and resumed elsewhere
	// Formed is when the striped forest's last first session opened (every node placed and its
	// k sessions open), seconds from the common start; 0 for the chain.
	Formed float64
}

// Alive is the READY times of the nodes that did not die.
func (r *Result) Alive() []float64 {
	out := make([]float64, 0, len(r.Ready))
	for _, t := range r.Ready {
		if !math.IsNaN(t) {
			out = append(out, t)
		}
	}
	return out
}

// Run simulates one rollout.
func Run(p Params) (*Result, error) {
	if p.Nodes < 1 || p.Rate <= 0 || len(p.Layout.Pieces) == 0 {
		return nil, errors.New("sim: want nodes, a rate and a layout")
	}
	if p.OriginRate <= 0 {
		p.OriginRate = p.Rate
	}
	if p.Stripes > 0 {
		return runStriped(p)
	}
	if p.KillRoot > 0 {
		return nil, errors.New("sim: KillRoot is the striped forest's (Stripes)")
	}
	if p.MaxChildren <= 0 {
		p.MaxChildren = DefaultMaxChildren
	}
	p.Roots = min(max(p.Roots, 1), p.Nodes)
	s := newState(p)
	s.run()
	res := &Result{Ready: make([]float64, p.Nodes), Depth: make([]int, p.Nodes)}
	for i, n := range s.nodes {
		res.Depth[i] = n.depth
		switch {
		case n.dead:
			res.Ready[i] = math.NaN()
			res.Dead++
		case n.readyAt < 0:
			return nil, fmt.Errorf("sim: node %d never READY (depth %d, %d of %d pieces)", i, n.depth, n.cursor, len(p.Layout.Pieces))
		default:
			res.Ready[i] = n.readyAt
		}
		if n.fromRegistry {
			res.Registry++
		}
	}
	res.Copies = float64(s.originBytes) / float64(p.Layout.Bytes)
	res.Orphans = s.orphans
	return res, nil
}

// state is a rollout under way.
type state struct {
	p           Params
	q           queue
	rng         *rand.Rand
	nodes       []*node
	origin      *node
	rank        []int // the rendezvous ranking: node indices, the root first
	rankOf      []int
	originBytes int64
	orphans     int
	sending     int // pieces on the wire
}

// node is one node, or the origin (index -1 in parents).
type node struct {
	id           int
	dead         bool
	announced    bool    // lists the artifact: building (or READY)
	announcedAt  float64 // since when
	asks         int     // listing rounds and scans so far
	fromRegistry bool
	parent       *node
	depth        int // -1 before it has a source
	children     []*node
	cursor       int // the next piece it receives
	avail        int // pieces it serves (verified)
	readyAt      float64
	// the uplink: the child being sent a piece, the send's version (a death bumps it), and the
	// round-robin place among the children
	sendingTo *node
	ver       int
	rr        int
	// asking: the round's start and its backoff interval, and which round (0: RootWait, 1: the
	// round past busy, 2: after the wait for the nodes ranked before it)
	roundStart float64
	interval   float64
	round      int
	lastBusy   bool
	// an orphan's first failure and backoff
	orphanSince float64
	retry       float64
}

func newState(p Params) *state {
	s := &state{p: p, rng: rand.New(rand.NewPCG(p.Seed, 0x5eed))}
	s.origin = &node{id: -1, announced: true, depth: -1, readyAt: 0, avail: len(p.Layout.Pieces), cursor: len(p.Layout.Pieces)}
	for i := range p.Nodes {
		s.nodes = append(s.nodes, &node{id: i, depth: -1, readyAt: -1})
	}
	s.rank = s.rng.Perm(p.Nodes)
	s.rankOf = make([]int, p.Nodes)
	for r, i := range s.rank {
		s.rankOf[i] = r
	}
	start := p.Start.Seconds()
	for _, n := range s.nodes {
		s.at(start, func() { s.firstAsk(n) })
	}
	if k := int(math.Round(p.Fail * float64(p.Nodes))); k > 0 {
		copyTime := float64(p.Layout.Bytes) / p.Rate
		for _, i := range s.rng.Perm(p.Nodes)[:k] {
			n := s.nodes[i]
			t := start + copyTime*(0.1+0.8*s.rng.Float64())
			s.at(t, func() { s.die(n) })
		}
	}
	return s
}

// at schedules f at time t (seconds).
func (s *state) at(t float64, f func()) { s.q.push(t, f) }

func (s *state) run() {
	for s.q.len() > 0 {
		s.q.pop()()
	}
}

// now is the time of the event being run.
func (s *state) now() float64 { return s.q.now }

// maxChildren is the child slots of a source at depth d.
func (s *state) maxChildren(n *node) int {
	if n.readyAt >= 0 || n.depth < 0 || n.depth >= len(s.p.FanOut) {
		return s.p.MaxChildren
	}
	return s.p.FanOut[n.depth]
}

func (s *state) full(n *node) bool { return n != s.origin && len(n.children) >= s.maxChildren(n) }

// listTime is one listing round over the other nodes.
func (s *state) listTime() float64 {
	return min(s.p.ListBase.Seconds()+s.p.ListPerPeer.Seconds()*float64(s.p.Nodes-1), ListTimeout.Seconds())
}

// scanTime is a selection's opens when none served: every peer is tried once.
func (s *state) scanTime() float64 { return s.p.Open.Seconds() * float64(s.p.Nodes-1) }
