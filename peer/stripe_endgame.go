package peer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// The endgame of a striped fetch: a stripe that lags (every other stripe
// is done, or it has a few pieces left and several times what any other
// stripe has) opens one second session for the stripe, with one of the
// forest's adopters of its source, else the root or a member ranked before
// this one; one that does not answer, or answers busy, is passed over. The
// second session asks for the stripe's units from the end backwards while
// the first goes on from the front. A rail claims each unit before it asks
// for it and passes over the units another rail claimed or verified, so a
// unit comes from one session only; a rail that ends releases the claims
// of the units it did not verify. Both sessions verify every piece before
// it is written or served on. The stripe's fetch ends once both sessions
// did, having met.

// reattachEndgame is the reason a stripe took a second source for its
// last pieces, as logged and counted (weightsnap_peer_reattach_total).
const reattachEndgame = "endgame"

// endgameTick is how often a striped fetch looks for a lagging stripe.
const endgameTick = 200 * time.Millisecond

// endgamePieces is the most pieces a stripe that lags the others, with
// some of them not done yet, has left for its endgame to begin.
const endgamePieces = 16

// endgameLag is how many times the bytes any other stripe has left a
// stripe has left when it lags the others.
const endgameLag = 4

// unitKey names a unit in a claim: a piece by its place in its shard,
// whichever session's list of the parent's pieces it comes from.
type unitKey struct {
	shard int
	off   int64
}

// railClaim is one rail connection as the claimant of the units it asks
// for.
type railClaim struct {
	addr string // the peer the rail fetches from
}

// claim takes u for by: false when another rail claimed it or it is
// verified. Without claims (a fetch not striped) every unit is by's.
func (ut *unitTable) claim(u *unit, by *railClaim) bool {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	if ut.claims == nil {
		return true
	}
	if p := u.parent; p != nil {
		if p.done {
			return false
		}
		if p.pieces != nil {
			u = p.pieces[u.piece]
		}
	}
	if u.done {
		return false
	}
	k := unitKey{shard: u.shard, off: u.off}
	if c, ok := ut.claims[k]; ok && c != by {
		return false
	}
	ut.claims[k] = by
	return true
}

// release lets go of the units by claimed and did not verify; those it
// verified stay its.
func (ut *unitTable) release(by *railClaim) {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	if ut.claims == nil {
		return
	}
	done := map[unitKey]bool{}
	for _, u := range ut.units {
		if u.done && u.pieces == nil {
			done[unitKey{shard: u.shard, off: u.off}] = true
		}
		for _, p := range u.pieces {
			if u.done || p.done {
				done[unitKey{shard: p.shard, off: p.off}] = true
			}
		}
	}
	for k, c := range ut.claims {
		if c == by && !done[k] {
			delete(ut.claims, k)
		}
	}
}

// unclaimed says whether one of us is claimed by no rail.
func (ut *unitTable) unclaimed(us []*unit) bool {
	ut.mu.Lock()
	defer ut.mu.Unlock()
	for _, u := range us {
		if _, ok := ut.claims[unitKey{shard: u.shard, off: u.off}]; !ok {
			return true
		}
	}
	return false
}

// endgame is a striped fetch's second sessions, one at most a stripe.
type endgame struct {
	watching chan struct{} // closed once the watch ended

	mu    sync.Mutex
	ended []chan struct{} // per stripe: closed once its second session ended; nil before one began
	runs  sync.WaitGroup
}

// newEndgame is the endgame of f, a striped fetch, whose rails claim the
// units they ask for from now on.
func (f *fetcher) newEndgame() *endgame {
	f.units.claims = map[unitKey]*railClaim{}
	return &endgame{watching: make(chan struct{}), ended: make([]chan struct{}, f.forest.forest.Stripes())}
}

// begin records stripe s's second session as begun; false if one did.
func (eg *endgame) begin(s int) bool {
	eg.mu.Lock()
	defer eg.mu.Unlock()
	if eg.ended[s] != nil {
		return false
	}
	eg.ended[s] = make(chan struct{})
	eg.runs.Add(1)
	return true
}

// end records that stripe s's second session ended.
func (eg *endgame) end(s int) {
	eg.mu.Lock()
	defer eg.mu.Unlock()
	close(eg.ended[s])
	eg.runs.Done()
}

// meet waits for stripe s's second session, if one began, to end: the
// units it claimed are verified or released then.
func (eg *endgame) meet(ctx context.Context, s int) {
	eg.mu.Lock()
	ended := eg.ended[s]
	eg.mu.Unlock()
	if ended == nil {
		return
	}
	select {
	case <-ended:
	case <-ctx.Done():
	}
}

// wait waits for the watch and every second session to end.
func (eg *endgame) wait() {
	<-eg.watching
	eg.runs.Wait()
}

// watchEndgame looks at the stripes' bytes left every endgameTick until
// ctx ends, and begins the endgame of each stripe that lags.
func (f *fetcher) watchEndgame(ctx context.Context, eg *endgame, w *stripeWatch) {
	defer close(eg.watching)
	t := time.NewTicker(endgameTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		left := f.stripeBytesLeft()
		for s := range left {
			if lagging(s, left) && f.units.unclaimed(f.stripeTodo(f.forest.stripe(s))) && eg.begin(s) {
				src, _ := w.source(s)
				go func() {
					defer eg.end(s)
					f.secondSession(ctx, s, src)
				}()
			}
		}
	}
}

// lagging says whether stripe s lags the others, by their bytes left:
// every other stripe is done, or s has at most endgamePieces pieces left
// and endgameLag times what any other stripe has.
func lagging(s int, left []int64) bool {
	if left[s] == 0 || len(left) < 2 {
		return false
	}
	var most int64
	for o, n := range left {
		if o != s {
			most = max(most, n)
		}
	}
	return most == 0 || left[s] <= endgamePieces*blake3.PieceSize && left[s] >= endgameLag*most
}

// secondSession fetches stripe s's units not claimed yet, the last first,
// over a session with the first of its endgame sources, after src, that
// answers. A source that served a bad piece is named and passed over.
func (f *fetcher) secondSession(ctx context.Context, s int, src string) {
	stripe := f.forest.stripe(s)
	for _, a := range f.endgameSources(src, s) {
		cs, err := f.openStripe(ctx, a, stripe, false)
		if err != nil {
			log.G(ctx).WithError(err).WithField("peer", a).WithField("stripe", stripe.String()).Debug("peer: a second source for a lagging stripe did not answer")
			continue
		}
		todo := f.stripeTodo(stripe)
		slices.Reverse(todo)
		if f.forest.reattach != nil {
			f.forest.reattach(reattachEndgame)
		}
		log.G(ctx).WithField("peer", a).WithField("stripe", stripe.String()).WithField("left", len(todo)).
			Info("peer: the stripe lags; asking a second source for its last pieces")
		err = f.runStripe(ctx, cs, todo)
		switch {
		case err == nil || ctx.Err() != nil:
		case errdefs.IsDataLoss(err):
			f.refuse(ctx, a, stripe, err, "the second source")
		default:
			log.G(ctx).WithError(err).WithField("peer", a).WithField("stripe", stripe.String()).
				Info("peer: the stripe's second source failed; its units go back to the first")
		}
		return
	}
}

// endgameSources are the members, each once, that may serve stripe s's
// last pieces beside its source src: the root, whose uplink is spare once
// its stripe heads are done, then the forest's adopters of this node in
// src's place, then the members ranked before this one; never src, one
// that takes the stripe through src, this node or a peer remembered as
// down.
func (f *fetcher) endgameSources(src string, s int) []string {
	fp := f.forest
	var out []string
	candidates := append([]string{fp.forest.Root()}, fp.forest.Adopters(fp.self, src, s)...)
	for _, a := range append(candidates, fp.forest.Ranking()...) {
		if a == fp.self {
			break
		}
		if a != src && !slices.Contains(out, a) && !f.o.Client.Down.down(a) && !fp.through(a, src, s) {
			out = append(out, a)
		}
	}
	return out
}

// through says whether member m takes stripe s through src.
func (fp *forestPlan) through(m, src string, s int) bool {
	members := len(fp.forest.Ranking())
	for p, hops := fp.forest.Parent(m, s), 0; p != "" && hops < members; p, hops = fp.forest.Parent(p, s), hops+1 {
		if p == src {
			return true
		}
	}
	return false
}
