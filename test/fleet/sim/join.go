package sim

// Joining: a node's first selection lists the peers; the rendezvous root (the top of the ranking
// of the live nodes; with Roots, one of the top Roots) takes the registry at once when no peer
// holds or builds the artifact. The others ask again on the jittered backoff for RootWait, one
// more round when the last answer was busy, and a node ranked k past the root waits (k-1)
// orphanSteps and asks once more when nothing was ever announced, before it takes the registry
// (peer/provider.go's fetcherFor). An ask lists every peer, then opens sessions in the listing's
// order (orderSources): the first holder or builder with a source and a free child slot serves.

// firstAsk is a node's first selection.
func (s *state) firstAsk(n *node) {
	if n.dead {
		return
	}
	n.asks++
	seen := s.seenBy(n, s.now(), s.listTime())
	s.at(s.now()+s.listTime(), func() {
		if n.dead {
			return
		}
		if s.attach(n, seen) {
			return
		}
		if !n.lastBusy && s.liveRank(n) < s.p.Roots {
			s.registry(n)
			return
		}
		n.round, n.roundStart, n.interval = roundA, s.now(), ReaskFirst.Seconds()
		s.failedAsk(n)
	})
}

// failedAsk schedules n's next ask within its round, or ends the round. The rounds: A; B (past
// busy) when A ended busy; when the last ended otherwise, a node ranked k > 1 waits (k-1)
// orphanSteps and asks again: C, and D past busy. Then the registry.
func (s *state) failedAsk(n *node) {
	next := n.interval * (1 - reaskJitter + 2*reaskJitter*s.rng.Float64())
	n.interval = min(n.interval*reaskFactor, ReaskMax.Seconds())
	if s.now()-n.roundStart+next <= RootWait.Seconds() {
		s.at(s.now()+next, func() { s.ask(n) })
		return
	}
	switch {
	case n.round == roundA && n.lastBusy, n.round == roundC && n.lastBusy:
		n.round++
		s.restartRound(n)
	case (n.round == roundA || n.round == roundB) && !n.lastBusy:
		if k := s.liveRank(n); k > 1 {
			n.round = roundC
			s.at(s.now()+float64(k-1)*OrphanStep.Seconds(), func() { s.restartRound(n) })
			return
		}
		s.registry(n)
	default:
		s.registry(n)
	}
}

// The rounds of asks of a node that is not the root.
const (
	roundA = iota
	roundB
	roundC
	roundD
)

// liveRank is n's place in the rendezvous ranking of the live nodes.
func (s *state) liveRank(n *node) int {
	r := 0
	for _, i := range s.rank {
		if i == n.id {
			return r
		}
		if !s.nodes[i].dead {
			r++
		}
	}
	return r
}

// restartRound starts a round of asks now.
func (s *state) restartRound(n *node) {
	if n.dead || n.parent != nil {
		return
	}
	n.roundStart, n.interval = s.now(), ReaskFirst.Seconds()
	s.ask(n)
}

// ask is one selection: a listing, then the opens.
func (s *state) ask(n *node) {
	if n.dead {
		return
	}
	n.asks++
	seen := s.seenBy(n, s.now(), s.listTime())
	s.at(s.now()+s.listTime(), func() {
		if n.dead || s.attach(n, seen) {
			return
		}
		// Every peer is then tried once, in turn: one that started building before its turn
		// serves.
		n.asks++
		turn := s.seenBy(n, s.now(), s.scanTime())
		s.at(s.now()+s.scanTime(), func() {
			if n.dead || s.attach(n, turn) {
				return
			}
			s.failedAsk(n)
		})
	})
}

// seenBy says whether n's listing round (or scan) from t0 over span sees m announced: each peer
// answers at its own instant within the span (a uniform one, fixed by the seed).
func (s *state) seenBy(n *node, t0, span float64) func(m *node) bool {
	k := uint64(n.asks)<<40 ^ uint64(n.id)<<20 ^ s.p.Seed<<52
	return func(m *node) bool {
		return m.announcedAt <= t0+span*unit(k^uint64(m.id))
	}
}

// unit is a uniform number in [0, 1) made from x (splitmix64).
func unit(x uint64) float64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// attach opens a session on the best source n may take now among those seen, as orderSources
// ranks them; false when none serves (n.lastBusy: one answered busy).
func (s *state) attach(n *node, seen func(*node) bool) bool {
	best, busy := s.choose(n, n.depth, seen)
	n.lastBusy = busy
	if best == nil {
		return false
	}
	s.adopt(n, best, s.now()+2*s.p.Open.Seconds()) // the selection's session, then the fetch's
	return true
}

// choose is the source a node at depth (-1: none yet) takes now: holders, then builders with a
// source, each with the fewest children first, then the nearest the origin; a full one answers
// busy; a builder at depth or deeper is not eligible.
func (s *state) choose(n *node, depth int, seen func(*node) bool) (best *node, busy bool) {
	better := func(a, b *node) bool {
		ah, bh := a.readyAt >= 0, b.readyAt >= 0
		switch {
		case ah != bh:
			return ah
		case s.p.Shallowest && a.depth != b.depth:
			return a.depth < b.depth
		case len(a.children) != len(b.children):
			return len(a.children) < len(b.children)
		case a.depth != b.depth:
			return a.depth < b.depth
		}
		return a.avail > b.avail
	}
	for _, m := range s.nodes {
		if m == n || m.dead || !m.announced || m.depth < 0 || (seen != nil && !seen(m)) {
			continue
		}
		if m.readyAt < 0 && depth >= 0 && m.depth >= depth {
			continue
		}
		if s.full(m) {
			busy = true
			continue
		}
		if best == nil || better(m, best) {
			best = m
		}
	}
	return best, busy
}

// adopt makes p n's source, its bytes starting at t: n announces its build at its new depth.
func (s *state) adopt(n, p *node, t float64) {
	p.children = append(p.children, n)
	n.parent = p
	if p.readyAt >= 0 && p != s.origin {
		n.depth = 0
	} else {
		n.depth = p.depth + 1
	}
	s.at(t, func() {
		if !n.announced {
			n.announced, n.announcedAt = true, s.now()
		}
		s.wake(p)
	})
}

// registry sends n to the origin: the manifest, the index and the headers, then the payload
// from the first piece it has not verified. It serves as a builder at depth 0 once announced.
func (s *state) registry(n *node) {
	if n.dead {
		return
	}
	n.fromRegistry = true
	s.at(s.now()+s.p.Setup.Seconds(), func() {
		if n.dead {
			return
		}
		s.origin.children = append(s.origin.children, n)
		n.parent, n.depth = s.origin, 0
		if !n.announced {
			n.announced, n.announcedAt = true, s.now()
		}
		s.wake(s.origin)
	})
}
