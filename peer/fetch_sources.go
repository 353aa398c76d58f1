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
)

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
func (f *fetcher) orphanWait(ctx context.Context) time.Duration {
	if f.depth > 1 {
		return DefaultRootWait
	}
	if f.orphanAfter >= 0 {
		return f.orphanAfter
	}
	rank := rand.N(orphanStep)
	if f.o.self != "" {
		near := []string{f.o.self}
		for _, o := range listSources(ctx, f.o.Client, f.peers, f.base.ID) {
			if o != nil && o.building && o.depth >= 0 && o.depth <= 1 && o.addr != f.o.self {
				near = append(near, o.addr)
			}
		}
		rank = time.Duration(slices.Index(rendezvous(f.base.ID, near), f.o.self)) * orphanStep
	}
	f.orphanAfter = orphanSettle + rank
	return f.orphanAfter
}

// Orphans near the origin: within orphanSettle of losing their source
// each one has listed the others; orphanStep is longer than a registry
// pull takes to announce its build.
const (
	orphanSettle = 300 * time.Millisecond
	orphanStep   = time.Second
)

// nextSession opens a session on the next peer after the one used last
// that serves the same bytes, passing over peers that served wrong bytes
// while another is left.
func (f *fetcher) nextSession(ctx context.Context) (*clientSession, error) {
	var last error
	for i := range f.peers {
		k := (f.last + 1 + i) % len(f.peers)
		if f.refused[f.peers[k]] && len(f.refused) < len(f.peers) {
			continue
		}
		cs, err := openSession(ctx, f.o.Client, f.peers[k], f.request)
		if err != nil {
			last = err
			continue
		}
		if err := sameContent(f.base, cs.manifest); err != nil {
			cs.close()
			last = &Error{Addr: f.peers[k], Err: fmt.Errorf("%w: %w", err, errdefs.ErrConflict)}
			continue
		}
		if err := f.eligible(cs.addr, cs.manifest); err != nil {
			cs.close()
			last = err
			continue
		}
		f.last = k
		return cs, nil
	}
	return nil, &noSourceError{peers: len(f.peers), depth: f.depth, last: last}
}

// eligible says whether a peer may be this fetch's source: a holder
// always; a builder once it has a source itself and, once this fetch has
// a depth, only at a smaller one. Depths then fall along every chain of
// builders, which therefore ends at a holder or the registry: no cycle.
func (f *fetcher) eligible(addr string, m *wire.WeightManifest) error {
	switch {
	case !m.Building:
		return nil
	case m.Depth < 0:
		return &Error{Addr: addr, Err: fmt.Errorf("it builds %s but %w: no source yet: %w", m.ID.Short(), errNotNearer, errdefs.ErrUnavailable)}
	case f.depth >= 0 && m.Depth >= f.depth:
		return &Error{Addr: addr, Err: fmt.Errorf("it builds %s but %w: depth %d, this node's %d: %w",
			m.ID.Short(), errNotNearer, m.Depth, f.depth, errdefs.ErrUnavailable)}
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
// again while it may wait (fetchAll).
func (e *noSourceError) Unwrap() error { return e.last }

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

// use records the session's peer and this fetch's depth through it, and
// detects a restart by its generation.
func (f *fetcher) use(ctx context.Context, cs *clientSession) error {
	if old, ok := f.gens[cs.addr]; ok && old != cs.manifest.Generation {
		f.rep.Restarts++
		log.G(ctx).WithField("peer", cs.addr).WithField("old", artifact.ShortHex(old)).WithField("new", artifact.ShortHex(cs.manifest.Generation)).
			Warn("peer: restarted since its last session: nothing of that session is reused but the verified bytes")
	}
	f.gens[cs.addr] = cs.manifest.Generation
	if d := sourceDepth(cs.manifest); d != f.depth {
		f.depth = d
		if f.seed != nil {
			if err := f.seed.Source(d); err != nil {
				return err
			}
		}
	}
	f.rep.Peer = cs.addr
	if n := len(f.rep.Peers); n == 0 || f.rep.Peers[n-1] != cs.addr {
		f.rep.Peers = append(f.rep.Peers, cs.addr)
	}
	return nil
}

// sourceDepth is the depth of a fetch served by m's peer.
func sourceDepth(m *wire.WeightManifest) int {
	if m.Building {
		return m.Depth + 1
	}
	return 0
}
