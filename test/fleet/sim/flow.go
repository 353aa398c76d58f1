package sim

// The bytes: a source's uplink sends one piece at a time, in turn to each child that lacks a
// piece the source has verified (round robin: each of k busy children gets a k-th of the
// uplink). A piece that lands at a node fed by a peer is served on a hop's delay later; at a
// node fed by the registry, once its tensor landed whole (the root checks each tensor against the
// index as it is written), a hop's delay later. The last piece makes the node READY a
// publication later; it then serves as a holder.

// rate is n's uplink. With Params.Machine, a send starting while k others are under way gets at
// most a k+1-th of the machine, slowed by its load (Params.Contention).
func (s *state) rate(n *node) float64 {
	if n == s.origin {
		return s.p.OriginRate
	}
	return s.p.Rate
}

// wake starts n's uplink on the next child it can send a piece, if it is idle.
func (s *state) wake(n *node) {
	if n.dead || n.sendingTo != nil || len(n.children) == 0 {
		return
	}
	for i := range n.children {
		k := (n.rr + i) % len(n.children)
		c := n.children[k]
		if c.dead || c.parent != n || c.cursor >= len(s.p.Layout.Pieces) || c.cursor >= n.avail {
			continue
		}
		n.rr = k + 1
		n.sendingTo = c
		piece := c.cursor
		ver := n.ver
		rate := s.rate(n)
		if m := s.p.Machine; m > 0 {
			load := float64(s.sending+1) * s.p.Rate / m
			rate = min(rate/(1+s.p.Contention*load), m/float64(s.sending+1))
		}
		s.sending++
		s.at(s.now()+float64(s.p.Layout.Pieces[piece])/rate, func() { s.sending--; s.landed(n, c, piece, ver) })
		return
	}
}

// landed is piece of c, sent by n, arriving.
func (s *state) landed(n, c *node, piece, ver int) {
	if ver != n.ver || n.dead {
		return // the send died with its source
	}
	n.sendingTo = nil
	if c.dead || c.parent != n || c.cursor != piece {
		s.wake(n)
		return
	}
	c.cursor++
	if n == s.origin {
		s.originBytes += s.p.Layout.Pieces[piece]
	}
	if n != s.origin || s.p.Layout.TensorEnd[piece] {
		upto := c.cursor
		s.at(s.now()+s.p.HopDelay.Seconds(), func() {
			c.avail = max(c.avail, upto)
			s.wake(c)
		})
	}
	if c.cursor == len(s.p.Layout.Pieces) {
		s.at(s.now()+s.p.Publish.Seconds(), func() {
			if !c.dead {
				c.readyAt = s.now()
				s.detach(c)
			}
		})
	}
	s.wake(n)
}

// detach ends n's session with its source, which then serves its other children.
func (s *state) detach(n *node) {
	p := n.parent
	if p == nil {
		return
	}
	if i := indexOf(p.children, n); i >= 0 {
		p.children = append(p.children[:i], p.children[i+1:]...)
	}
	if p.sendingTo == n {
		p.sendingTo = nil
		p.ver++
	}
	n.parent = nil
	s.wake(p)
}

func indexOf(ns []*node, n *node) int {
	for i, m := range ns {
		if m == n {
			return i
		}
	}
	return -1
}
