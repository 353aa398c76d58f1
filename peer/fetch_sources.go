package peer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/peer/stripes"
)

// sources choose the peer each session of a fetch runs with: the one the
// selection found first, then the next that serves the same bytes,
// passing over peers that served wrong ones, and a builder only nearer a
// complete source than this fetch (its depth), so builders never wait on
// each other. They notice a peer that restarted by its generation.
type sources struct {
	peers   []string
	request wire.Request
	client  ClientConfig
	self    string               // Provider.Self, for orphanWait
	base    *wire.WeightManifest // the selection's: every later session serves the same bytes
	sess    *clientSession       // opened by the selection; the first session uses it
	last    int                  // index of the peer used last
	// depth is this fetch's depth once a session served it, -1 before: 0
	// from a holder, a builder's depth plus one from that builder
	// (artifact.Seeder.Source).
	depth       int
	orphanAfter time.Duration     // orphanWait's, -1 before it is computed
	gens        map[string]string // each peer's generation, as its last session said
	refused     map[string]bool   // peers that served a unit with wrong bytes
}

func newSources(peers []string, request wire.Request, o FetchOptions) *sources {
	return &sources{peers: peers, request: request, client: o.Client, self: o.self, depth: -1, orphanAfter: -1,
		gens: map[string]string{}, refused: map[string]bool{}}
}

// take hands over the selection's session, if it is still open.
func (s *sources) take() *clientSession {
	cs := s.sess
	s.sess = nil
	return cs
}

// closeSession drops a selection's session the fetch did not use.
func (s *sources) closeSession() {
	if cs := s.take(); cs != nil {
		cs.close()
	}
}

// orphanWait is how long a fetch whose sources are gone asks the peers
// again before it gives up (and resolution takes the registry). Orphans
// near the origin (depth 0 or 1: their source was a holder or the root)
// lose it at the same instant and agree on which of them takes the origin
// first: the builders listed at depth 0 or 1 and this node, ranked by
// rendezvous hashing, each wait orphanSettle and then orphanStep per rank
// (a random instant under it without this node's address), so every
// orphan lists the others before the first one leaves, and the first
// one's new build is announced before the next one would go. A node
// farther down waits for its upstream to recover, up to DefaultRootWait.
// Computed once, at the first miss of a source.
func (s *sources) orphanWait(ctx context.Context) time.Duration {
	if s.depth > 1 {
		return DefaultRootWait
	}
	if s.orphanAfter >= 0 {
		return s.orphanAfter
	}
	rank := rand.N(orphanStep)
	if s.self != "" {
		near := []string{s.self}
		offers, _ := listSources(ctx, s.client, s.peers, s.base.ID, false)
		for _, o := range offers {
			if o != nil && o.building && o.depth >= 0 && o.depth <= 1 && o.addr != s.self {
				near = append(near, o.addr)
			}
		}
		rank = time.Duration(slices.Index(stripes.Rank(s.base.ID, near), s.self)) * orphanStep
	}
	s.orphanAfter = orphanSettle + rank
	return s.orphanAfter
}

// Orphans near the origin: within orphanSettle of losing their source
// each one has listed the others; orphanStep is longer than a registry
// pull takes to announce its build.
const (
	orphanSettle = 300 * time.Millisecond
	orphanStep   = time.Second
)

// next opens a session on the next peer after the one used last that
// serves the same bytes, passing over peers that served wrong bytes while
// another is left, and asking the peers remembered as down last.
func (s *sources) next(ctx context.Context) (*clientSession, error) {
	order := make([]string, len(s.peers))
	for i := range s.peers {
		order[i] = s.peers[(s.last+1+i)%len(s.peers)]
	}
	var last error
	for _, addr := range s.client.Down.last(order) {
		k := slices.Index(s.peers, addr)
		if s.refused[addr] && len(s.refused) < len(s.peers) {
			continue
		}
		cs, err := openSession(ctx, s.client, addr, s.request)
		if err != nil {
			last = err
			continue
		}
		if err := sameContent(s.base, cs.manifest); err != nil {
			cs.close()
			last = &Error{Addr: addr, Err: fmt.Errorf("%w: %w", err, errdefs.ErrConflict)}
			continue
		}
		if err := s.eligible(cs.addr, cs.manifest); err != nil {
			cs.close()
			last = err
			continue
		}
		s.last = k
		return cs, nil
	}
	return nil, &noSourceError{peers: len(s.peers), depth: s.depth, last: last}
}

// refuse passes over addr, which served a unit that did not match, while
// another peer is left.
func (s *sources) refuse(addr string) { s.refused[addr] = true }

// eligible says whether a peer may be this fetch's source: a holder
// always; a builder once it has a source itself and, once this fetch has
// a depth, only at a smaller one. Depths then fall along every chain of
// builders, which therefore ends at a holder or the registry: no cycle.
func (s *sources) eligible(addr string, m *wire.WeightManifest) error {
	switch {
	case !m.Building:
		return nil
	case m.Depth < 0:
		return &Error{Addr: addr, Err: fmt.Errorf("it builds %s but %w: no source yet: %w", m.ID.Short(), errNotNearer, errdefs.ErrUnavailable)}
	case s.depth >= 0 && m.Depth >= s.depth:
		return &Error{Addr: addr, Err: fmt.Errorf("it builds %s but %w: depth %d, this node's %d: %w",
			m.ID.Short(), errNotNearer, m.Depth, s.depth, errdefs.ErrUnavailable)}
	}
	return nil
}

// errNotNearer is a builder that may not be a source (eligible).
var errNotNearer = errors.New("no nearer a complete source than this node")

// noSourceError says no peer could serve a fetch now: none answered, holds
// the artifact, or builds it nearer a complete source.
type noSourceError struct {
	peers, depth int
	last         error
}

func (e *noSourceError) Error() string {
	return fmt.Sprintf("none of %d peers serves it from nearer a complete source than this node (depth %d): %v", e.peers, e.depth, e.last)
}

// Unwrap returns the last peer's answer: a peer fault, so the fetch asks
// again while it may wait (fetchAll). With no answer (no peer was asked)
// it is errdefs.ErrUnavailable, never nil, which gRPC's error encoding
// could not follow.
func (e *noSourceError) Unwrap() error {
	if e.last == nil {
		return errdefs.ErrUnavailable
	}
	return e.last
}

// sameContent says whether two manifests describe the same bytes, so a
// fetch can resume from one peer's session with another's.
func sameContent(m, o *wire.WeightManifest) error {
	if m.ID != o.ID || len(m.Shards) != len(o.Shards) {
		return fmt.Errorf("the peer serves another artifact (%s) than the one being fetched (%s)", o.ID.Short(), m.ID.Short())
	}
	for i := range m.Shards {
		if err := artifact.CompareEntry(m.Shards[i].FileEntry, o.Shards[i].FileEntry); err != nil {
			return fmt.Errorf("the peer's shards differ from the ones being fetched: %w", err)
		}
	}
	return nil
}

// use records the session's peer's generation, saying whether the peer
// restarted since its last session, and this fetch's depth through it,
// saying whether it changed.
func (s *sources) use(ctx context.Context, cs *clientSession) (restarted, moved bool) {
	if old, ok := s.gens[cs.addr]; ok && old != cs.manifest.Generation {
		restarted = true
		log.G(ctx).WithField("peer", cs.addr).WithField("old", artifact.ShortHex(old)).WithField("new", artifact.ShortHex(cs.manifest.Generation)).
			Warn("peer: restarted since its last session: nothing of that session is reused but the verified bytes")
	}
	s.gens[cs.addr] = cs.manifest.Generation
	if d := sourceDepth(cs.manifest); d != s.depth {
		s.depth, moved = d, true
	}
	return restarted, moved
}

// use starts a session: the sources record its peer and this fetch's
// depth through it, which a seeding fetch records; the statistics count it.
func (f *fetcher) use(ctx context.Context, cs *clientSession) error {
	restarted, moved := f.src.use(ctx, cs)
	if moved && f.seed != nil {
		if err := f.seed.Source(f.src.depth); err != nil {
			return err
		}
	}
	f.stats.session(cs.addr, restarted)
	return nil
}

// sourceDepth is the depth of a fetch served by m's peer.
func sourceDepth(m *wire.WeightManifest) int {
	if m.Building {
		return m.Depth + 1
	}
	return 0
}
