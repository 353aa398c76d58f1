package snapshotter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// leases holds one store lease per artifact that a holder has leased (the
// holder table says which) or a Prepare has in flight, and runs at most
// one resolution per ID at a time. A committed weight snapshot alone
// holds no lease: its artifact stays in the store, unleased, until
// something uses it again.
type leases struct {
	life     *life // the resolutions nobody waits for run on
	resolver Resolver
	holders  *holderTable
	metrics  *Metrics

	mu      sync.Mutex
	held    map[artifact.ID]*held   // by ID
	flights map[artifact.ID]*flight // resolutions in progress, by ID
	closed  bool
}

// held is one leased artifact: kept while a holder has it leased or a
// Prepare has it in flight.
type held struct {
	id       artifact.ID
	lease    *store.Lease
	inflight int  // the uses in flight: Prepares, host mounts being made, repairs
	retired  bool // its lease found the artifact invalid: out of the table, closed when no use is in flight
}

// flight is one resolution of an ID, shared by every Prepare that
// asks for it meanwhile.
type flight struct {
	done     chan struct{}
	waiters  int  // Prepares waiting; each has it in flight when it lands
	finished bool // under leases.mu
	held     *held
	report   *resolve.Report
	err      error
}

func newLeases(lf *life, r Resolver, t *holderTable, m *Metrics) *leases {
	return &leases{life: lf, resolver: r, holders: t, metrics: m,
		held: map[artifact.ID]*held{}, flights: map[artifact.ID]*flight{}}
}

// acquire returns the artifact of ptr, in flight (finish ends that), and the
// report of the resolution that produced it (nil when it was already held).
// Concurrent calls for one ID share one resolution, which runs on in
// the background if every caller gives up.
func (l *leases) acquire(ctx context.Context, ptr pointer.Pointer) (*held, *resolve.Report, error) {
	id := ptr.ID
	l.mu.Lock()
	if h := l.held[id]; h != nil && !h.lease.Invalid() {
		h.inflight++
		l.mu.Unlock()
		return h, nil, nil
	} else if h != nil {
		l.retire(h)
		l.dropIfUnused(h)
	}
	f := l.flights[id]
	if f == nil {
		f = l.start(id, ptr)
	}
	f.waiters++
	l.mu.Unlock()
	select {
	case <-f.done:
		return f.held, f.report, f.err
	case <-ctx.Done():
		l.mu.Lock()
		landed := f.finished
		if !landed {
			f.waiters--
		}
		l.mu.Unlock()
		if landed && f.err == nil {
			l.finish(f.held)
		}
		return nil, nil, ctx.Err()
	}
}

// prefetch starts resolving each pointer that is neither held nor being
// resolved, and does not wait: containerd prepares an image's layers one
// after the other, so an image's later weight layers (Pointer.Next) resolve
// while the earlier ones are prepared. A resolution nobody waits for
// leaves its artifact in the store and lets the lease go.
func (l *leases) prefetch(ctx context.Context, ptrs []pointer.Pointer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range ptrs {
		id := p.ID
		if l.held[id] != nil || l.flights[id] != nil || l.closed {
			continue
		}
		l.start(id, p)
		log.G(ctx).WithField("id", p.ID).WithField("artifact", p.Artifact).Debug("resolving a later weight layer ahead")
	}
}

// start starts the resolution of ptr; l.mu is held.
func (l *leases) start(id artifact.ID, ptr pointer.Pointer) *flight {
	f := &flight{done: make(chan struct{})}
	l.flights[id] = f
	l.life.wg.Add(1)
	go l.fly(id, f, ptr)
	return f
}

// fly runs one resolution and hands its lease, in flight once per waiter, to
// the table.
func (l *leases) fly(id artifact.ID, f *flight, ptr pointer.Pointer) {
	defer l.life.wg.Done()
	start := time.Now()
	stop := func() {}
	req := resolve.Request{ID: ptr.ID, Artifact: ptr.Artifact, Hold: true, OnProduce: func(source string, p artifact.Producer) {
		stop()
		stop = l.follow(id, source, p)
	}}
	res, err := l.resolver.Resolve(l.life.ctx, req)
	stop()
	l.metrics.resolved(res.Report, time.Since(start))
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.flights, id)
	f.finished, f.report, f.err = true, res.Report, err
	if err == nil {
		switch {
		case l.closed:
			res.Close()
			f.err = fmt.Errorf("snapshotter closed: %w", errdefs.ErrUnavailable)
		case f.waiters == 0: // everyone gave up: the artifact stays in the store
			res.Close()
		default:
			f.held = l.hold(id, res.Lease)
			f.held.inflight = f.waiters
		}
	}
	close(f.done)
}

// progressLogEvery is how often a resolution in flight logs how far it is;
// its progress gauges follow it every second.
const progressLogEvery = 5 * time.Second

// follow shows the progress of the producer a resolution of id runs, in
// the metrics every second and in the log every progressLogEvery, until
// the returned stop.
func (l *leases) follow(id artifact.ID, source string, p artifact.Producer) (stop func()) {
	r, ok := p.(artifact.ProgressReporter)
	if !ok {
		return func() {}
	}
	g, gt := l.metrics.progress.WithLabelValues(id.String(), source), l.metrics.progressTotal.WithLabelValues(id.String(), source)
	start, logged := time.Now(), time.Now()
	end := artifact.Follow(r, time.Second, func(done, total int64) {
		g.Set(float64(done))
		gt.Set(float64(total))
		if time.Since(logged) >= progressLogEvery {
			logged = time.Now()
			log.G(l.life.ctx).WithField("id", id.String()).WithField("source", source).WithField("bytes", done).
				WithField("total_bytes", total).WithField("mib_per_second", float64(done)/(1<<20)/time.Since(start).Seconds()).
				Info("resolving: weights in flight")
		}
	})
	return func() {
		end()
		l.metrics.progress.DeleteLabelValues(id.String(), source)
		l.metrics.progressTotal.DeleteLabelValues(id.String(), source)
	}
}

// hold enters a lease into the table, not in flight; l.mu is held and id is
// not held yet.
func (l *leases) hold(id artifact.ID, lease *store.Lease) *held {
	h := &held{id: id, lease: lease}
	l.held[id] = h
	l.metrics.leasesHeld.Set(float64(len(l.held)))
	return h
}

// heldNow attaches holders to the artifact id when its lease is held, and
// says whether it is.
func (l *leases) heldNow(id artifact.ID, holders ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[id]
	if h == nil {
		return false
	}
	for _, name := range holders {
		l.holders.set(name, id, useLeased)
	}
	return true
}

// adopt gives holders a lease taken outside a resolution (from the store);
// when the artifact is held already, the lease is closed.
func (l *leases) adopt(lease *store.Lease, holders ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[lease.ID]
	switch {
	case l.closed:
		lease.Close()
		return
	case h != nil:
		lease.Close()
	default:
		h = l.hold(lease.ID, lease)
	}
	for _, name := range holders {
		l.holders.set(name, h.id, useLeased)
	}
}

// attach records that holder has h leased; h is in flight, so its lease
// cannot go meanwhile.
func (l *leases) attach(h *held, holder string) {
	l.holders.set(holder, h.id, useLeased)
}

// finish ends one use in flight of h; an artifact nothing needs any more
// is let go, and so is one its lease found invalid.
func (l *leases) finish(h *held) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h.inflight--
	if h.lease.Invalid() {
		l.retire(h)
	}
	l.dropIfUnused(h)
}

// retire takes h, whose lease found the artifact invalid, out of the
// table, so that the next use resolves the artifact again; its lease
// closes once no use is in flight. l.mu is held.
func (l *leases) retire(h *held) {
	h.retired = true
	if l.held[h.id] == h {
		delete(l.held, h.id)
		l.metrics.leasesHeld.Set(float64(len(l.held)))
	}
}

// forget forgets holder (a snapshot removed or committed, a mount undone)
// in the holder table, its repairs with it; the last holder of an artifact
// lets its lease go.
func (l *leases) forget(ctx context.Context, holder string) {
	ids := l.holders.drop(holder)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if h := l.held[id]; h != nil && l.dropIfUnused(h) {
			log.G(ctx).WithField("id", id.String()).WithField("holder", holder).Info("lease released: nothing uses the artifact")
		}
	}
}

// dropIfUnused closes the lease of an artifact no holder has leased and no
// Prepare has in flight, and that of a retired one no Prepare has in
// flight; l.mu is held.
func (l *leases) dropIfUnused(h *held) bool {
	if h.retired {
		if h.inflight == 0 {
			h.lease.Close()
		}
		return false
	}
	if h.inflight > 0 || l.held[h.id] != h || l.holders.anyOf(h.id, useLeased) {
		return false
	}
	delete(l.held, h.id)
	h.lease.Close()
	l.metrics.leasesHeld.Set(float64(len(l.held)))
	return true
}

// close lets every lease go.
func (l *leases) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for id, h := range l.held {
		h.lease.Close()
		delete(l.held, id)
	}
	l.metrics.leasesHeld.Set(0)
}

// identities are the artifacts held, for tests and inspection.
func (l *leases) identities() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id := range l.held {
		out = append(out, id.String())
	}
	return out
}

// holdersOf lists the holders that have the artifact id leased, sorted;
// leased is whether its lease is held.
func (l *leases) holdersOf(id artifact.ID) (holders []string, leased bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[id] == nil {
		return nil, false
	}
	return l.holders.of(id, useLeased), true
}
