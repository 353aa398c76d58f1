package peer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
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
// not answer within it is remembered as down.
const listTimeout = 2 * time.Second

// listGrace is how long a listing that found what it looks for waits for
// the peers still out: a peer on the node's network answers well within
// it, so the configured order holds among live peers, and a dead one costs
// no more.
const listGrace = 250 * time.Millisecond

// source is one peer's offer of an artifact.
type source struct {
	addr     string
	building bool
	full     bool // serving max_children sessions of it already
	children int
	depth    int // a builder's: -1 while it has no source
	verified int64
}

// listing is one peer's answer to a listing: what it holds, or why not.
type listing struct {
	ls  *wire.Listing
	err error
}

// listPeers lists the peers not remembered as down at once and returns
// each one's listing, or its failure: a peer passed over, or one that did
// not answer within listTimeout. With enough it returns early: once enough
// says the listings so far are done, or listGrace after it first says they
// decide (the peers still out get that long to answer). A peer that did
// not answer in the time it was given is remembered as down; the listings
// go on to their own end, and one that answers after all is forgotten.
func listPeers(ctx context.Context, cfg ClientConfig, addrs []string, enough func([]listing) (decided, done bool)) []listing {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(listTimeout, cfg.withDefaults().Timeout))
	stop := context.AfterFunc(ctx, cancel)
	type answer struct {
		i int
		listing
	}
	answers := make(chan answer, len(addrs))
	listings := make([]listing, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		if err := cfg.Down.passedOver(addr); err != nil {
			listings[i].err = err
			continue
		}
		wg.Go(func() {
			ls, err := cfg.List(lctx, addr)
			answers <- answer{i, listing{ls, err}}
		})
	}
	listed := make(chan struct{})
	go func() { wg.Wait(); stop(); cancel(); close(listed) }()
	// unanswered fills in the peers still out; waited says they had their
	// time to answer and are remembered as down (an answer that comes
	// later forgets them).
	unanswered := func(waited bool) []listing {
		for i, l := range listings {
			if l.ls == nil && l.err == nil {
				listings[i].err = &Error{Addr: addrs[i], Err: fmt.Errorf("no listing in time: %w", os.ErrDeadlineExceeded)}
				if waited {
					cfg.Down.note(ctx, addrs[i], listings[i].err)
				}
			}
		}
		return listings
	}
	var grace <-chan time.Time
	for {
		select {
		case a := <-answers:
			listings[a.i] = a.listing
			if enough == nil {
				continue
			}
			decided, done := enough(listings)
			if done {
				return unanswered(false)
			}
			if decided && grace == nil {
				t := time.NewTimer(listGrace)
				defer t.Stop()
				grace = t.C
			}
			continue
		case <-grace:
		case <-listed:
		case <-lctx.Done():
		}
		for {
			select {
			case a := <-answers:
				listings[a.i] = a.listing
			default:
				return unanswered(true)
			}
		}
	}
}

// listSources lists the peers and returns each one's offer of id, nil for
// a peer that did not list it, and whether each answered its listing. With
// firstHolder it returns once a peer that holds id and serves fewer than
// max_children sessions of it answered, and the peers listed before it
// did or had listGrace to: the source to take.
func listSources(ctx context.Context, cfg ClientConfig, addrs []string, id artifact.ID, firstHolder bool) (offers []*source, answered []bool) {
	offer := func(addr string, ls *wire.Listing) *source {
		if ls == nil {
			return nil
		}
		for _, a := range ls.Artifacts {
			if a.ID == id || a.ManifestDigest == id.String() {
				return &source{addr: addr, building: a.Building, children: a.Children, depth: a.Depth, verified: a.VerifiedBytes,
					full: ls.MaxChildren > 0 && a.Children >= ls.MaxChildren}
			}
		}
		return nil
	}
	var enough func([]listing) (bool, bool)
	if firstHolder {
		// A holder decides the listing; the peers listed before it, once
		// they answered, settle it.
		enough = func(ls []listing) (decided, done bool) {
			out := false
			for _, l := range ls {
				if o := offer("", l.ls); o != nil && !o.building && !o.full {
					return true, !out
				}
				out = out || l.ls == nil && l.err == nil
			}
			return false, false
		}
	}
	listings := listPeers(ctx, cfg, addrs, enough)
	offers, answered = make([]*source, len(addrs)), make([]bool, len(addrs))
	for i, addr := range addrs {
		offers[i], answered[i] = offer(addr, listings[i].ls), listings[i].ls != nil
	}
	return offers, answered
}

// orderSources returns the peers in the order to ask for id: holders,
// then builders, each not full and with the fewest children first, then
// full ones, then the peers that did not list it in their configured
// order, those remembered as down last. absent are the peers whose
// listing answered without id: asking them would be a session refused.
// The listing ends at the first holder that is not full (listSources).
func orderSources(ctx context.Context, cfg ClientConfig, addrs []string, id artifact.ID) (ordered []string, absent map[string]bool) {
	offers, answered := listSources(ctx, cfg, addrs, id, true)
	var got []source
	var rest []string
	absent = map[string]bool{}
	for i, addr := range addrs {
		if o := offers[i]; o != nil {
			got = append(got, *o)
		} else {
			rest, absent[addr] = append(rest, addr), answered[i]
		}
	}
	rest = cfg.Down.last(rest)
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
	return append(ordered, rest...), absent
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
