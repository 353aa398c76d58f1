package peer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/internal/netfail"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"github.com/weightsnap/weightsnap/peer/stripes"
	"golang.org/x/sync/errgroup"
)

// The striped fetch: a node that misses places the fleet itself, from the
// member list alone (peer/stripes), and opens one session per stripe to its
// source in that stripe, each asking for that stripe's pieces only; every
// piece is checked against its chaining value before it is written or
// served on. A stripe whose source fails (it died, or served a piece that
// failed its check) re-attaches to the first live member of the forest's
// adopters, with the pieces it verified; a source that served a bad piece
// is named in the log and passed over (DownPeers). A stripe whose source
// is slow is taken over by an adopter that has room (stripe_lag.go).

// forestPlan is a striped fetch's place in the striped forest.
type forestPlan struct {
	forest *stripes.Forest
	self   string
	// wait is how long a stripe asks its source again while the source
	// has not announced its build yet (it starts at the same instant).
	wait time.Duration
	// leave, if set, is told of a fetch that found no source left in a
	// stripe: resolution goes on to its next source (Provider.originNext).
	leave func(ctx context.Context, reason string, err error)
	// slowAfter is the window of a stripe's rate, and how long, twice for
	// each hop of this node's depth in the stripe, the rate stays slow
	// before an adopter takes the stripe over (stripe_lag.go); 0: never.
	slowAfter time.Duration
	// reattach, if set, is told of each stripe that left its source for
	// another, with the reason.
	reattach func(reason string)
}

// stripe is stripe s of the forest, as a request names it.
func (fp *forestPlan) stripe(s int) wire.Stripe {
	return wire.Stripe{Index: s, Count: fp.forest.Stripes()}
}

// depth is this node's hops from the root in its deepest stripe.
func (fp *forestPlan) depth() int {
	d := 0
	for s := range fp.forest.Stripes() {
		d = max(d, fp.forest.Depth(fp.self, s))
	}
	return min(d, artifact.MaxDepth)
}

// sources are this node's sources in the forest, its own stripe's first,
// each once, with the stripe to ask it for.
func (fp *forestPlan) sources() (addrs []string, stripe []int) {
	k := fp.forest.Stripes()
	own := max(fp.forest.Interior(fp.self), 0)
	for i := range k {
		s := (own + i) % k
		if p := fp.forest.Parent(fp.self, s); p != "" && !slices.Contains(addrs, p) {
			addrs, stripe = append(addrs, p), append(stripe, s)
		}
	}
	return addrs, stripe
}

// newForestFetcher reads the manifest of request's artifact from the
// first of this node's sources in the forest that serves it, asking them
// again while none has announced its build, for at most fp.wait.
func newForestFetcher(ctx context.Context, peers []string, request wire.Request, o FetchOptions, fp *forestPlan) (*fetcher, error) {
	o.Client = o.Client.withDefaults()
	if o.Mode == ModeRMA {
		return nil, fmt.Errorf("a striped fetch runs on the tcp plane, not %s: %w", o.Mode, errdefs.ErrNotImplemented)
	}
	o.Mode, o.Rails = ModeTCP, 1
	if o.Patience <= 0 {
		o.Patience = DefaultPatience
	}
	if o.Client.Down == nil {
		o.Client.Down = NewDownPeers()
	}
	addrs, ss := fp.sources()
	ask := func() (*clientSession, error) {
		var errs []error
		for i, addr := range addrs {
			if err := o.Client.Down.passedOver(addr); err != nil {
				errs = append(errs, err)
				continue
			}
			q := request
			q.Stripe = fp.stripe(ss[i])
			cs, err := openSession(ctx, o.Client, addr, q)
			if err == nil {
				return cs, nil
			}
			if ctx.Err() != nil {
				return nil, backoff.Permanent(ctx.Err())
			}
			errs = append(errs, err)
		}
		return nil, &noPeerError{request: request, errs: errs}
	}
	b := &backoff.ExponentialBackOff{InitialInterval: reaskFirst, RandomizationFactor: 0.5, Multiplier: 1.5, MaxInterval: reaskMax}
	cs, err := backoff.Retry(ctx, ask, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(fp.wait))
	if err != nil {
		return nil, err
	}
	cs.close()
	if cs.manifest.PieceSize != blake3.PieceSize {
		return nil, &Error{Addr: cs.addr, Err: fmt.Errorf("it serves pieces of %d bytes, a striped fetch takes pieces of %d: %w",
			cs.manifest.PieceSize, blake3.PieceSize, errdefs.ErrNotImplemented)}
	}
	f := &fetcher{o: o, src: newSources(peers, request, o), forest: fp, stats: fetchStats{onProgress: o.Progress}}
	f.base, f.identity, f.src.base = cs.manifest, cs.manifest.Identity, cs.manifest
	log.G(ctx).WithField("id", f.base.ID.Short()).WithField("peer", cs.addr).WithField("stripes", fp.forest.Stripes()).
		WithField("depth", fp.depth()).Debug("peer: placed in the striped forest")
	return f, nil
}

// fetchForest fetches every stripe at once, each from its source in the
// forest.
func (f *fetcher) fetchForest(ctx context.Context) error {
	fp := f.forest
	order := newPieceOrder(f.base)
	for _, u := range f.units.units {
		u.first = order.first(u.shard, u.off)
	}
	if f.seed != nil {
		if err := f.seed.Source(fp.depth()); err != nil {
			return err
		}
	}
	f.stats.sessions.Mode, f.stats.sessions.Rails = ModeTCP, 1
	depth := make([]int, fp.forest.Stripes())
	for s := range depth {
		depth[s] = fp.forest.Depth(fp.self, s)
	}
	w := newStripeWatch(fp.slowAfter, depth)
	eg := f.newEndgame()
	g, gctx := errgroup.WithContext(ctx)
	wctx, stop := context.WithCancel(gctx)
	var slowWatch sync.WaitGroup
	if fp.slowAfter > 0 {
		slowWatch.Go(func() { f.watchStripes(wctx, w) })
	}
	go f.watchEndgame(wctx, eg, w)
	for s := range fp.forest.Stripes() {
		g.Go(func() error { return f.fetchStripe(gctx, s, w, eg) })
	}
	err := g.Wait()
	stop()
	slowWatch.Wait()
	eg.wait()
	return err
}

// fetchStripe fetches stripe s's pieces from this node's source in it. A
// source that answers but has served nothing yet is asked again, within
// the plan's wait, and so, once, is one whose build ended (it builds again
// from its next source); a source that cannot be reached, is busy, fails
// once it served, or served a bad piece is left for the next of its
// adopters in the forest, with the pieces verified so far kept; a slow one
// is left for the adopter that took the stripe over (w). A lagging
// stripe's last pieces come from a second source too (eg).
func (f *fetcher) fetchStripe(ctx context.Context, s int, w *stripeWatch, eg *endgame) error {
	defer w.end(s)
	fp := f.forest
	stripe := fp.stripe(s)
	src := fp.forest.Parent(fp.self, s)
	tried := map[string]bool{src: true}
	gone := map[string]bool{}    // sources that could not be reached or served a bad piece
	rebuilt := map[string]bool{} // sources whose build ended, asked again for their next one
	rounds := 1                  // passes over the stripe's candidates
	served := false              // src served this stripe a piece
	start := time.Now()
	var adopted *clientSession // an adopter's session that took the stripe over from a slow source
	defer func() {
		if adopted != nil {
			adopted.close()
		}
	}()
	b := &backoff.ExponentialBackOff{InitialInterval: retryFirst, Multiplier: 2, MaxInterval: retryMax}
	b.Reset()
	for {
		todo := f.stripeTodo(stripe)
		if len(todo) == 0 {
			return nil
		}
		sctx, cancel := context.WithCancelCause(ctx)
		w.session(s, src, cancel, time.Now())
		cs := adopted
		adopted = nil
		var err error
		if cs == nil {
			cs, err = f.openStripe(sctx, src, stripe, false)
		}
		// Busy, once the session is open, is a range or its pieces
		// refused because the source's build ended without publishing
		// (store.BuildEndedError).
		ended := false
		if err == nil {
			err = f.runStripe(sctx, cs, todo)
			ended = isBusy(err)
		}
		cancel(nil)
		served = served || len(f.stripeTodo(stripe)) < len(todo)
		if adopted = w.takeHandoff(s); adopted != nil {
			f.reattached(ctx, stripe, src, adopted.addr, reattachSlow, &Error{Addr: src, Err: errSlowSource})
			src, served, start = adopted.addr, false, time.Now()
			tried[src] = true
			b.Reset()
			continue
		}
		if err == nil {
			eg.meet(ctx, s)
			continue
		}
		if ctx.Err() != nil {
			return fmt.Errorf("fetch interrupted: %w", context.Cause(ctx))
		}
		if !peerFault(err) {
			return err
		}
		liar := errdefs.IsDataLoss(err)
		if ended && !rebuilt[src] {
			// It goes on to its next source (the registry, for the member
			// that takes a gone root's place) and builds again: it is
			// asked again, as a source that has not announced its build.
			rebuilt[src] = true
			served, start = false, time.Now()
			log.G(ctx).WithError(err).WithField("peer", src).WithField("stripe", stripe.String()).Debug("peer: the stripe's source ended its build; asking it again for its next one")
		}
		if !liar && !served && !netfail.Unreachable(err) && (ended || !isBusy(err)) && time.Since(start) < fp.wait {
			// The source may not have announced its build yet.
			select {
			case <-time.After(b.NextBackOff()):
			case <-ctx.Done():
				return fmt.Errorf("fetch interrupted: %w", context.Cause(ctx))
			}
			continue
		}
		if liar || netfail.Unreachable(err) {
			gone[src] = true
		}
		if liar {
			f.refuse(ctx, src, stripe, err, "the source")
		}
		next := f.adopter(src, s, tried)
		if next == "" && !f.rootsPlace(gone) && rounds < stripeRounds {
			// Every candidate was tried, but some only answered busy or
			// ended a build: once more from the source the forest names.
			rounds++
			select {
			case <-time.After(b.NextBackOff()):
			case <-ctx.Done():
				return fmt.Errorf("fetch interrupted: %w", context.Cause(ctx))
			}
			tried = maps.Clone(gone)
			if next = fp.forest.Parent(fp.self, s); tried[next] {
				next = f.adopter(next, s, tried)
			}
		}
		if next == "" {
			reason := "no source left in a stripe"
			if f.rootsPlace(gone) {
				reason = "the root of the striped forest is gone; this node takes its place"
			}
			err = fmt.Errorf("stripe %s: %s after %s: %w: %w", stripe, reason, src, err, errdefs.ErrUnavailable)
			if fp.leave != nil {
				fp.leave(ctx, reason, err)
			}
			return err
		}
		reason := reattachFailed
		if liar {
			reason = reattachBadPiece
		}
		f.reattached(ctx, stripe, src, next, reason, err)
		src, served, start = next, false, time.Now()
		tried[src] = true
		b.Reset()
	}
}

// Reasons a stripe leaves its source for an adopter, as logged and counted
// (weightsnap_peer_reattach_total).
const (
	reattachFailed   = "source failed"
	reattachBadPiece = "bad piece"
	reattachSlow     = "slow"
)

// reattached logs, counts and records that stripe left its source src
// for next, for reason.
func (f *fetcher) reattached(ctx context.Context, stripe wire.Stripe, src, next, reason string, err error) {
	if f.forest.reattach != nil {
		f.forest.reattach(reason)
	}
	log.G(ctx).WithError(err).WithField("peer", src).WithField("adopter", next).WithField("stripe", stripe.String()).
		WithField("reason", reason).WithField("left", len(f.stripeTodo(stripe))).Warn("peer: leaving the stripe's source; re-attaching to an adopter")
	f.stats.mu.Lock()
	f.stats.sessions.Failovers++
	f.stats.mu.Unlock()
}

// refuse names src, a source (what: its part in the stripe) that served
// a piece of stripe that failed its check, in the log and the fetch's
// stats, and passes it over from now on.
func (f *fetcher) refuse(ctx context.Context, src string, stripe wire.Stripe, err error, what string) {
	f.o.Client.Down.drop(src, err)
	f.stats.mu.Lock()
	f.stats.sessions.Refused = append(f.stats.sessions.Refused, src)
	f.stats.mu.Unlock()
	log.G(ctx).WithError(err).WithField("peer", src).WithField("stripe", stripe.String()).
		Warn("peer: " + what + " served a piece that failed its check; it is passed over")
}

// adopter is the source stripe s takes after failed, the first not tried
// yet and not remembered as down: one of the forest's adopters of this
// node, else the root, else, the root gone, the first member of the
// rendezvous ranking after it, which takes the root's place; "" when that
// is this node itself or none is left.
func (f *fetcher) adopter(failed string, s int, tried map[string]bool) string {
	fp := f.forest
	for _, a := range append(fp.forest.Adopters(fp.self, failed, s), fp.forest.Ranking()...) {
		if a == fp.self {
			return ""
		}
		if !tried[a] && !f.o.Client.Down.down(a) {
			return a
		}
	}
	return ""
}

// stripeRounds is how many passes over its candidates a stripe makes
// before it gives up on the peers.
const stripeRounds = 3

// rootsPlace says whether this node takes the place of a gone root: every
// member ranked before it is gone (could not be reached or served a bad
// piece) or is remembered as down. A member that answered busy is not gone.
func (f *fetcher) rootsPlace(gone map[string]bool) bool {
	fp := f.forest
	for _, m := range fp.forest.Ranking() {
		if m == fp.self {
			return true
		}
		if !gone[m] && !f.o.Client.Down.down(m) {
			return false
		}
	}
	return false
}

// openStripe opens a session of stripe with addr, marked as taking the
// stripe over from a slow source with slow.
func (f *fetcher) openStripe(ctx context.Context, addr string, stripe wire.Stripe, slow bool) (*clientSession, error) {
	q := f.src.request
	q.Stripe, q.Slow = stripe, slow
	cs, err := openSession(ctx, f.o.Client, addr, q)
	if err != nil {
		return nil, err
	}
	if err := sameContent(f.base, cs.manifest); err != nil {
		cs.close()
		return nil, &Error{Addr: addr, Err: fmt.Errorf("%w: %w", err, errdefs.ErrConflict)}
	}
	return cs, nil
}

// runStripe fetches todo over the open session cs, and closes it.
func (f *fetcher) runStripe(ctx context.Context, cs *clientSession, todo []*unit) error {
	f.stats.session(cs.addr, false)
	if err := cs.startPlane(ctx, ModeTCP, 1); err != nil {
		cs.close()
		return err
	}
	if err := f.runTCP(ctx, cs, [][]*unit{todo}); err != nil {
		cs.close()
		return err
	}
	return cs.finish()
}

// stripeTodo are the units and pieces of stripe not verified yet: a unit
// not in pieces yet when one of its pieces is the stripe's.
func (f *fetcher) stripeTodo(stripe wire.Stripe) []*unit {
	var out []*unit
	for _, u := range f.units.remaining() {
		var has bool
		switch {
		case u.parent != nil:
			has = stripe.Has(u.parent.first + u.piece)
		case u.n <= blake3.PieceSize:
			has = stripe.Has(u.first)
		default:
			has = stripeTouches(stripe, u.first, blake3.Pieces(u.n))
		}
		if has {
			out = append(out, u)
		}
	}
	return out
}

// stripeTouches says whether one of the n pieces from first is stripe's.
func stripeTouches(stripe wire.Stripe, first, n int64) bool {
	k := int64(stripe.Count)
	if k == 0 || n >= k {
		return true
	}
	return (int64(stripe.Index)-first%k+k)%k < n
}
