package peer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/stripes"
)

// Choosing a source without a coordinator: every peer is asked what it
// holds and builds (list), holders come first, then builders attached to a
// source, each with the fewest children first, then the nearest a complete
// source; a builder with no source yet, or a peer serving max_children
// sessions of the artifact already, comes last (it would be refused or
// answer busy). Nodes that start together agree on one root per artifact
// by rendezvous hashing.

// listTimeout bounds the listing round of a source choice: a peer that does
// not answer within it is tried after the ones that did.
const listTimeout = 2 * time.Second

// source is one peer's offer of an artifact.
type source struct {
	addr     string
	building bool
	full     bool // serving max_children sessions of it already
	children int
	depth    int // a builder's: -1 while it has no source
	verified int64
}

// listSources lists every peer at once and returns each one's offer of
// id, nil for a peer that did not list it (within listTimeout).
func listSources(ctx context.Context, cfg ClientConfig, addrs []string, id artifact.ID) []*source {
	lctx, cancel := context.WithTimeout(ctx, min(listTimeout, cfg.withDefaults().Timeout))
	defer cancel()
	offers := make([]*source, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			ls, err := cfg.List(lctx, addr)
			if err != nil {
				return
			}
			for _, a := range ls.Artifacts {
				if a.ID == id || a.ManifestDigest == id.String() {
					offers[i] = &source{addr: addr, building: a.Building, children: a.Children, depth: a.Depth, verified: a.VerifiedBytes,
						full: ls.MaxChildren > 0 && a.Children >= ls.MaxChildren}
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-lctx.Done(): // the stragglers end at their own timeout
	}
	return offers
}

// orderSources returns the peers in the order to ask for id: holders,
// then builders, each not full and with the fewest children first, then
// full ones, then the peers that did not list it in their configured
// order. found says whether any peer holds or builds it.
func orderSources(ctx context.Context, cfg ClientConfig, addrs []string, id artifact.ID) (ordered []string, found bool) {
	offers := listSources(ctx, cfg, addrs, id)
	var got []source
	var rest []string
	for i, addr := range addrs {
		if o := offers[i]; o != nil {
			got = append(got, *o)
		} else {
			rest = append(rest, addr)
		}
	}
	slices.SortStableFunc(got, func(a, b source) int {
		switch {
		case a.full != b.full:
			return boolCmp(a.full, b.full)
		case a.building != b.building:
			return boolCmp(a.building, b.building)
		case (a.depth < 0) != (b.depth < 0):
			return boolCmp(a.depth < 0, b.depth < 0)
		case a.children != b.children:
			return a.children - b.children
		case a.depth != b.depth:
			return a.depth - b.depth
		}
		return int(min(max(b.verified-a.verified, -1), 1)) // the builder further along first
	})
	for _, s := range got {
		ordered = append(ordered, s.addr)
	}
	return append(ordered, rest...), len(got) > 0
}

func boolCmp(a, b bool) int {
	if a == b {
		return 0
	}
	if a {
		return 1
	}
	return -1
}

// isRoot says whether self is the node that goes to the registry for id
// when no peer holds or builds it: the top of the rendezvous ranking of
// the peers and self.
func isRoot(id artifact.ID, peers []string, self string) bool {
	all := append(slices.Clone(peers), self)
	return stripes.Rank(id, all)[0] == self
}
