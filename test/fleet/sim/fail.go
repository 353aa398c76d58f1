package sim

// Deaths and orphans: a node that dies drops every session at once (its process is killed). Its
// source serves its other children; each child retries after RetryFirst, opening sessions on its
// peers in the order of its selection (the builders nearer the origin come first, one open per
// depth above it), and takes the first holder or builder nearer the origin with a free slot,
// resuming from what it verified. None: it retries on the doubling backoff until its orphanWait
// (DefaultRootWait below depth 1; orphanSettle plus orphanStep per rank among the builders at depth
// 0 or 1 and itself, ranked by rendezvous) and takes the registry, resuming too (peer/fetch_sources.go).

// die kills n mid-transfer.
func (s *state) die(n *node) {
	if n.dead || n.readyAt >= 0 {
		return
	}
	n.dead = true
	n.ver++
	s.detach(n)
	children := n.children
	n.children, n.sendingTo = nil, nil
	for _, c := range children {
		if c.dead || c.parent != n {
			continue
		}
		c.parent = nil
		s.orphans++
		c.orphanSince, c.retry = s.now(), RetryFirst.Seconds()
		s.at(s.now()+c.retry, func() { s.reattach(c) })
	}
}

// reattach is an orphan's next session: a scan of its peers nearer the origin.
func (s *state) reattach(c *node) {
	if c.dead || c.parent != nil {
		return
	}
	scan := s.p.Open.Seconds() * float64(max(c.depth, 1))
	s.at(s.now()+scan, func() {
		if c.dead || c.parent != nil {
			return
		}
		if p, _ := s.choose(c, c.depth, nil); p != nil {
			s.adopt(c, p, s.now()+s.p.Open.Seconds())
			return
		}
		if s.now()-c.orphanSince > s.orphanWait(c) {
			s.registry(c)
			return
		}
		c.retry = min(2*c.retry, RetryMax.Seconds())
		s.at(s.now()+c.retry, func() { s.reattach(c) })
	})
}

// orphanWait is how long an orphan asks again before it takes the registry.
func (s *state) orphanWait(c *node) float64 {
	if c.depth > 1 {
		return RootWait.Seconds()
	}
	rank := 0
	for _, m := range s.nodes {
		if m != c && !m.dead && m.announced && m.depth >= 0 && m.depth <= 1 && m.readyAt < 0 && s.rankOf[m.id] < s.rankOf[c.id] {
			rank++
		}
	}
	return OrphanSettle.Seconds() + float64(rank)*OrphanStep.Seconds()
}
