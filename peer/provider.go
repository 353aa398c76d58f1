package peer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/peer/internal/wire"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/stripes"
	"github.com/weightsnap/weightsnap/store"
)

// Provider is the weight-peer source of resolution: the configured peers,
// asked in order for the exact identity. It implements resolve.Provider and
// resolve.IDProvider without importing resolve.
type Provider struct {
	// Peers are host:port entries, IP addresses or DNS names with many
	// addresses (see ExpandPeers).
	Peers   []string
	Options FetchOptions
	// Self is the address other nodes reach this node's peer at (host:port,
	// as they list it), "" when unknown. With it, nodes that miss an
	// artifact together agree on one root (the top of the rendezvous
	// ranking of the peers and self), which goes to the registry at once;
	// the others ask the peers again for a holder or builder for up to
	// RootWait before they take the origin themselves. Without it, a node
	// that finds no source goes to the registry at once.
	Self string
	// RootWait bounds how long a node that is not the root asks again; 0
	// means DefaultRootWait.
	RootWait time.Duration
	// SlowAfter is the window of the striped fetch's slow-source rule
	// (stripe_lag.go), DefaultSlowAfter in the node's configuration; 0
	// leaves a slow source in place.
	SlowAfter time.Duration
	// Wants, if set, marks an artifact wanted on this node (store.Domain's
	// Want) from the start of its choice of a source until RootWait after
	// it: the node's peer lists it, and a node ranked below this one waits
	// for it. A node that is not the root takes the origin when no member
	// ranked above it wants, builds or holds the artifact (a lone resolve
	// among members that want nothing), where it would otherwise wait for
	// a root that never comes.
	Wants func(ctx context.Context, id artifact.ID) (release func(), err error)

	downOnce     sync.Once
	originOnce   sync.Once
	origins      *prometheus.CounterVec
	reattachOnce sync.Once
	reattaches   *prometheus.CounterVec
}

// Down is the provider's memory of the peers that failed to answer, kept
// across its fetches: Options.Client.Down, made on first use when unset.
func (p *Provider) Down() *DownPeers {
	p.downOnce.Do(func() {
		if p.Options.Client.Down == nil {
			p.Options.Client.Down = NewDownPeers()
		}
	})
	return p.Options.Client.Down
}

// Register adds the provider's metrics to r: the dead-peer memory's, the
// decisions to go to the origin and the stripes that left their source,
// by reason.
func (p *Provider) Register(r prometheus.Registerer) error {
	if err := p.Down().Register(r); err != nil {
		return err
	}
	if err := r.Register(p.originCounter()); err != nil {
		return err
	}
	return r.Register(p.reattachCounter())
}

// reattachCounter counts the stripes of striped fetches that left their
// source for another, by reason.
func (p *Provider) reattachCounter() *prometheus.CounterVec {
	p.reattachOnce.Do(func() {
		p.reattaches = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "peer",
			Name: "reattach_total", Help: "Times a stripe of a striped fetch left its source for another, or took a second source for its last pieces (endgame), by reason."}, []string{"reason"})
	})
	return p.reattaches
}

// originCounter counts the selections that found no source among the
// peers, by reason: each sends resolution on to the origin.
func (p *Provider) originCounter() *prometheus.CounterVec {
	p.originOnce.Do(func() {
		p.origins = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weightsnap", Subsystem: "peer",
			Name: "origin_total", Help: "Times a fetch found no source among the peers and resolution went on to the origin, by reason."}, []string{"reason"})
	})
	return p.origins
}

// DefaultRootWait is how long a node that is not an artifact's root asks
// the peers again before it goes to the registry itself: long enough for
// the root to plan its pull and announce it (a manifest and an index
// layer, well under a second on a registry near the nodes), short against
// the transfer of a model. It is the worst-case delay a dead or slow root
// adds to every other node.
const DefaultRootWait = 5 * time.Second

// DefaultSlowAfter is the slow-source rule's window in the node's
// configuration ([peer] slow_source_seconds): long against a piece's time
// on a slow link, so a stripe's rate is not a piece's jitter.
const DefaultSlowAfter = 5 * time.Second

// wantSettle is how long a node that finds no member ranked above it
// wanting the artifact waits before it looks again and takes the origin:
// longer than nodes that start together take to mark their wants.
const wantSettle = time.Second

// Waits between the asks of a node that is not the root: jittered, so the
// nodes' listings spread out.
const (
	reaskFirst = 100 * time.Millisecond
	reaskMax   = 800 * time.Millisecond
)

// fetcherFor finds a holder or builder of id among the peers (never this
// node itself): a node that is not the root of id asks again, jittered and
// for at most RootWait, while no peer has it or every one is busy. A clean
// miss (errdefs.ErrNotFound) sends resolution on to the registry.
func (p *Provider) fetcherFor(ctx context.Context, id artifact.ID) (*fetcher, error) {
	p.Down()
	addrs, err := ExpandPeers(ctx, p.Peers)
	if err != nil {
		return nil, err
	}
	addrs = slices.DeleteFunc(addrs, func(a string) bool { return a == p.Self })
	if len(addrs) == 0 {
		err := fmt.Errorf("no peer but this node: %w", errdefs.ErrNotFound)
		p.originNext(ctx, id, "no peer but this node", err)
		return nil, err
	}
	wait := p.RootWait
	if wait <= 0 {
		wait = DefaultRootWait
	}
	if p.Wants != nil {
		release, err := p.Wants(ctx, id)
		if err != nil {
			log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("peer: cannot mark the artifact wanted; nodes ranked below this one wait for it only as long as for a root")
		} else {
			// Held past the choice, until the build it chose announces.
			defer time.AfterFunc(wait, release)
		}
	}
	o := p.Options
	o.Tensors, o.self = nil, p.Self
	if o.Structure == StructureForest && p.Self != "" {
		f, placed, err := p.forestFetcher(ctx, id, addrs, o)
		if err == nil || !placed || ctx.Err() != nil {
			return f, err
		}
		// No source of the forest answered: its root, or the members
		// above this one, never started or failed before they announced.
		// The chain's choice lists the peers and agrees on a live root.
		log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("peer: no source in the striped forest; choosing one as the chain does")
	}
	f, err := newFetcher(ctx, addrs, wire.Request{ID: id}, o, false)
	// The root goes to the registry at once when no peer holds or builds
	// the artifact; when one does but cannot serve it now (busy, or a
	// builder not yet attached to a source) it asks again like any node.
	// A peer that could not be reached is no root: the nodes that see it
	// down agree on the next one (it would never announce a build).
	live := slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return slices.Contains(unreachablePeers(err), a) })
	root := isRoot(id, live, p.Self) && !isBusy(err) && !errors.Is(err, errNotNearer)
	if err == nil || p.Self == "" || root || !(errdefs.IsNotFound(err) || errdefs.IsUnavailable(err) || isBusy(err)) {
		switch {
		case err == nil:
		case root:
			p.originNext(ctx, id, "this node is the root", err)
		case p.Self == "":
			p.originNext(ctx, id, "no source, and no address of this node to rank it by", err)
		}
		return f, err
	}
	if p.Wants != nil && errdefs.IsNotFound(err) && !isBusy(err) && !errors.Is(err, errNotNearer) {
		if wanted, werr := p.wantedAbove(ctx, id, live); !wanted {
			if werr == nil {
				err = fmt.Errorf("no member ranked above this node wants %s: %w", id.Short(), errdefs.ErrNotFound)
				p.originNext(ctx, id, "no member ranked above this node wants the artifact", err)
			}
			return nil, cmp.Or(werr, err)
		}
	}
	log.G(ctx).WithField("id", id.Short()).WithField("wait", wait).Debug("peer: not the root; asking the peers again for a source")
	// The asks again go to the peers that answered: one down now costs the
	// connect timeout once, not on every ask.
	ask := func() (*fetcher, error) {
		b := &backoff.ExponentialBackOff{InitialInterval: reaskFirst, RandomizationFactor: 0.5, Multiplier: 1.5, MaxInterval: reaskMax}
		return backoff.Retry(ctx, func() (*fetcher, error) {
			f, err := newFetcher(ctx, live, wire.Request{ID: id}, o, false)
			if err != nil && !(errdefs.IsNotFound(err) || errdefs.IsUnavailable(err) || isBusy(err)) {
				return nil, backoff.Permanent(err)
			}
			return f, err
		}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(wait))
	}
	// A peer that answered busy at the end holds or builds the artifact,
	// and its child is about to: a chain is forming, so one more round of
	// asks (bounded, as the first) finds the child building, where going
	// to the registry would draw another copy from the origin (two orphans
	// that both found the first builder at once).
	askPastBusy := func() (*fetcher, error) {
		f, err := ask()
		if err != nil && isBusy(err) && ctx.Err() == nil {
			log.G(ctx).WithField("id", id.Short()).Debug("peer: the source answered busy; asking once more for a builder behind it")
			f, err = ask()
		}
		return f, err
	}
	f, err = askPastBusy()
	// The root never announced a build (its store refused the artifact, or
	// it failed before a byte): the nodes after it in the rendezvous order
	// take its place one orphanStep apart, so the next one takes the origin
	// and the others find it building, instead of all going at once.
	if err != nil && !isBusy(err) && ctx.Err() == nil {
		if k := slices.Index(stripes.Rank(id, append(slices.Clone(live), p.Self)), p.Self); k > 1 {
			log.G(ctx).WithField("id", id.Short()).WithField("rank", k).Debug("peer: the root built nothing; waiting for the nodes before this one")
			select {
			case <-time.After(time.Duration(k-1) * orphanStep):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			f, err = askPastBusy()
		}
	}
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("no peer holds or builds %s after %s: %w: %w", id.Short(), wait, err, errdefs.ErrNotFound)
		p.originNext(ctx, id, "no source after the wait", err)
		return nil, err
	}
	return f, err
}

// forestFetcher places this node in the striped forest of id over the
// peers and itself: the forest's root takes id from a stripe head that
// holds it (heldByHeads), or else goes to the registry (placed false); any
// other node reads the manifest from its sources in the
// forest, which it asks for up to RootWait while none has announced its
// build.
func (p *Provider) forestFetcher(ctx context.Context, id artifact.ID, addrs []string, o FetchOptions) (f *fetcher, placed bool, err error) {
	forest, err := stripes.Place(id, append(slices.Clone(addrs), p.Self), stripes.DefaultStripes)
	if err != nil {
		return nil, false, err
	}
	if forest.Root() == p.Self {
		f, err := heldByHeads(ctx, id, forest, o)
		if err == nil || ctx.Err() != nil {
			return f, true, err
		}
		err = fmt.Errorf("this node is the root of the striped forest of %s, and none of its stripe heads holds it: %w: %w", id.Short(), err, errdefs.ErrNotFound)
		p.originNext(ctx, id, "this node is the root of the striped forest", err)
		return nil, false, err
	}
	wait := p.RootWait
	if wait <= 0 {
		wait = DefaultRootWait
	}
	leave := func(ctx context.Context, reason string, err error) { p.originNext(ctx, id, reason, err) }
	reattach := func(reason string) { p.reattachCounter().WithLabelValues(reason).Inc() }
	f, err = newForestFetcher(ctx, addrs, wire.Request{ID: id}, o,
		&forestPlan{forest: forest, self: p.Self, wait: wait, leave: leave, slowAfter: p.SlowAfter, reattach: reattach})
	if err != nil {
		return nil, true, fmt.Errorf("no source of %s in the striped forest after %s: %w", id.Short(), wait, err)
	}
	return f, true, nil
}

// wantedAbove says whether a live member ranked above this node for id
// wants, builds or holds it: one that does comes for it, or serves it, so
// this node waits for it. When none does, it looks once more after
// wantSettle, for members that started with this one and have not marked
// their wants yet. A member above (one the choice reached: live) that is
// down by a look counts as wanting: it may have died building id, and its
// child, which takes the origin then, is the source to wait for, not a
// second copy from the origin. err is the context's.
func (p *Provider) wantedAbove(ctx context.Context, id artifact.ID, live []string) (wanted bool, err error) {
	ranking := stripes.Rank(id, append(slices.Clone(live), p.Self))
	above := ranking[:slices.Index(ranking, p.Self)]
	look := func() bool {
		for _, l := range listPeers(ctx, p.Options.Client, above, nil) {
			if l.ls == nil || slices.Contains(l.ls.Wants, id) || slices.ContainsFunc(l.ls.Artifacts, func(a wire.ListedArtifact) bool { return a.ID == id }) {
				return true
			}
		}
		return false
	}
	if look() {
		return true, nil
	}
	select {
	case <-time.After(wantSettle):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return look(), nil
}

// heldByHeads is the forest root's source of id when one of its stripe
// heads holds it whole: the heads are the members ranked right after the
// root, so the member that was the root before this node joined is the
// first of them. They are listed, not every member, so the root asks a
// stripe count of peers at most. A builder is not taken: while the forest
// forms, every builder's bytes come from the root.
func heldByHeads(ctx context.Context, id artifact.ID, forest *stripes.Forest, o FetchOptions) (*fetcher, error) {
	ranking := forest.Ranking()
	heads := ranking[1:min(len(ranking), 1+forest.Stripes())]
	var holders []string
	offers, _ := listSources(ctx, o.Client, heads, id, true)
	for _, s := range offers {
		if s != nil && !s.building {
			holders = append(holders, s.addr)
		}
	}
	if len(holders) == 0 {
		return nil, fmt.Errorf("none of %d stripe heads holds %s: %w", len(heads), id.Short(), errdefs.ErrNotFound)
	}
	f, err := newFetcher(ctx, holders, wire.Request{ID: id}, o, false)
	if err != nil {
		return nil, err
	}
	log.G(ctx).WithField("id", id.Short()).WithField("peer", holders[0]).Info("peer: the root of the striped forest takes the artifact from a stripe head that holds it")
	return f, nil
}

// originNext logs and counts a selection that found no source among the
// peers: resolution asks its next source, the registry unless another
// comes first. Each such decision is one line with its reason, so a
// fleet's trips to the origin can be counted from its logs and metrics.
func (p *Provider) originNext(ctx context.Context, id artifact.ID, reason string, err error) {
	p.originCounter().WithLabelValues(reason).Inc()
	log.G(ctx).WithError(err).WithField("id", id.Short()).WithField("reason", reason).Info("peer: no source among the peers; resolution goes on to its next source")
}

// isBusy says whether a peer answered busy (its sessions, or its
// max_children sessions of the artifact, are taken).
func isBusy(err error) bool {
	var re *wire.RemoteError
	return errors.As(err, &re) && re.Code == wire.StatusBusy
}

// Name implements resolve.Provider.
func (p *Provider) Name() string { return "peer" }

// Producer implements resolve.Provider: it finds the first peer that holds
// the identity and reads its manifest; a clean miss when none does. The
// producer fetches from that peer first, then from the others on failure.
func (p *Provider) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	digest, err := identity.ID()
	if err != nil {
		return nil, err
	}
	f, err := p.fetcherFor(ctx, digest)
	if err != nil {
		return nil, err // errdefs.ErrNotFound when no peer holds it: a clean miss
	}
	if f.base.ID != digest {
		return nil, fmt.Errorf("peer answered %s for %s: %w", f.base.ID.Short(), digest.Short(), errdefs.ErrConflict)
	}
	return f, nil
}

// Transfer implements store.TransferReporter: the peer the fetch finished
// with, the data plane, its rails and the bytes fetched and reused.
func (f *fetcher) Transfer() store.Transfer {
	return f.stats.transfer()
}

// ProducerForID implements resolve.IDProvider: a peer is asked for
// an artifact by its identity digest, and its manifest carries the identity.
func (p *Provider) ProducerForID(ctx context.Context, id artifact.ID) (artifact.Identity, artifact.Producer, error) {
	f, err := p.fetcherFor(ctx, id)
	if err != nil {
		return artifact.Identity{}, nil, err
	}
	return f.base.Identity, f, nil
}

// CarriedRecords are what the peer sent with the artifact to check it
// by (oci.Carrier): its signature records (nil for none), the identity
// and the files whose bytes the fetch verifies.
func (f *fetcher) CarriedRecords() ([]byte, artifact.Identity, []artifact.File) {
	files := make([]artifact.File, len(f.base.Shards))
	for i, s := range f.base.Shards {
		files[i] = s.File
	}
	return f.base.Records, f.base.Identity, files
}

// CheckSHA256 implements oci.Carrier: each file is read back once whole
// for its sha256, which a kept signature record binds, where the sender's
// tensor tree is only the sender's word.
func (f *fetcher) CheckSHA256() { f.checkSHA256 = true }
