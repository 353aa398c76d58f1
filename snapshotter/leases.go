package snapshotter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// leases holds one store lease per artifact that a holder uses (an active
// snapshot over weight snapshots, by its key: a container's rootfs, an
// image volume's mount, a view; or a host mount, by mountHolderPrefix and
// its directory) or a Prepare is using (a pin), and runs at most one
// resolution per identity at a time. A committed weight snapshot alone
// holds no lease: its artifact stays in the store, unleased, until
// something uses it again.
type leases struct {
	ctx      context.Context // bounds resolutions: the snapshotter's life
	resolver Resolver
	metrics  *Metrics

	mu       sync.Mutex
	held     map[artifact.ID]*held   // by identity
	byHolder map[string][]*held      // holder -> the artifacts it uses
	flights  map[artifact.ID]*flight // resolutions in progress, by identity
	closed   bool
}

// held is one leased artifact: kept while a holder uses it or a Prepare
// is using it (pinned).
type held struct {
	id      artifact.ID
	lease   *store.Lease
	holders map[string]struct{}
	pins    int
}

// flight is one resolution of an identity, shared by every Prepare that
// asks for it meanwhile.
type flight struct {
	done     chan struct{}
	waiters  int  // Prepares waiting; each gets a pin when it lands
	finished bool // under leases.mu
	held     *held
	report   *resolve.Report
	err      error
}

func newLeases(ctx context.Context, r Resolver, m *Metrics) *leases {
	return &leases{ctx: ctx, resolver: r, metrics: m,
		held: map[artifact.ID]*held{}, byHolder: map[string][]*held{}, flights: map[artifact.ID]*flight{}}
}

// acquire returns the artifact of ptr, pinned (release unpins it), and the
// report of the resolution that produced it (nil when it was already held).
// Concurrent calls for one identity share one resolution, which runs on in
// the background if every caller gives up.
func (l *leases) acquire(ctx context.Context, ptr pointer.Pointer) (*held, *resolve.Report, error) {
	id := ptr.ID
	l.mu.Lock()
	if h := l.held[id]; h != nil {
		h.pins++
		l.mu.Unlock()
		return h, nil, nil
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
			l.release(f.held)
		}
		return nil, nil, ctx.Err()
	}
}

// prefetch starts resolving each pointer that is neither held nor in
// flight, and does not wait: containerd prepares an image's layers one
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
		log.G(ctx).WithField("identity", p.ID).WithField("artifact", p.Artifact).Debug("resolving a later weight layer ahead")
	}
}

// start starts the resolution of ptr; l.mu is held.
func (l *leases) start(id artifact.ID, ptr pointer.Pointer) *flight {
	f := &flight{done: make(chan struct{})}
	l.flights[id] = f
	go l.fly(id, f, ptr)
	return f
}

// fly runs one resolution and hands its lease, pinned once per waiter, to
// the table.
func (l *leases) fly(id artifact.ID, f *flight, ptr pointer.Pointer) {
	start := time.Now()
	stop := func() {}
	req := resolve.Request{ID: ptr.ID, Artifact: ptr.Artifact, OnProduce: func(source string, p artifact.Producer) {
		stop()
		stop = l.follow(id, source, p)
	}}
	res, err := l.resolver.Resolve(l.ctx, req)
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
			f.held.pins = f.waiters
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
			log.G(l.ctx).WithField("identity", id.String()).WithField("source", source).WithField("bytes", done).
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

// hold enters a lease into the table, unpinned; l.mu is held and id is
// not held yet.
func (l *leases) hold(id artifact.ID, lease *store.Lease) *held {
	h := &held{id: id, lease: lease, holders: map[string]struct{}{}}
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
		l.attachLocked(h, name)
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
		l.attachLocked(h, name)
	}
}

// attach records that holder uses h.
func (l *leases) attach(h *held, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attachLocked(h, holder)
}

// attachLocked is attach; l.mu is held.
func (l *leases) attachLocked(h *held, holder string) {
	if _, ok := h.holders[holder]; ok {
		return
	}
	h.holders[holder] = struct{}{}
	l.byHolder[holder] = append(l.byHolder[holder], h)
}

// release unpins h; an artifact nothing needs any more is let go.
func (l *leases) release(h *held) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h.pins--
	l.dropIfUnused(h)
}

// detach forgets holder (a snapshot removed or committed, a mount undone);
// the last holder of an artifact lets its lease go.
func (l *leases) detach(ctx context.Context, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.byHolder[holder] {
		delete(h.holders, holder)
		if l.dropIfUnused(h) {
			log.G(ctx).WithField("identity", h.id.String()).WithField("holder", holder).Info("lease released: nothing uses the artifact")
		}
	}
	delete(l.byHolder, holder)
}

// dropIfUnused closes the lease of an artifact no holder and no Prepare
// uses; l.mu is held.
func (l *leases) dropIfUnused(h *held) bool {
	if h.pins > 0 || len(h.holders) > 0 || l.held[h.id] != h {
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
	clear(l.byHolder)
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

// holds says whether holder has its artifacts' leases.
func (l *leases) holds(holder string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byHolder[holder]) > 0
}

// holdersOf lists the holders of the artifact id, sorted; leased is
// whether its lease is held.
func (l *leases) holdersOf(id artifact.ID) (holders []string, leased bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[id]
	if h == nil {
		return nil, false
	}
	for name := range h.holders {
		holders = append(holders, name)
	}
	slices.Sort(holders)
	return holders, true
}
