package snapshotter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// leases holds one store lease per artifact that a committed weight
// snapshot needs, and runs at most one resolution per identity at a time.
type leases struct {
	ctx      context.Context // bounds resolutions: the snapshotter's life
	resolver Resolver
	metrics  *Metrics

	mu      sync.Mutex
	held    map[string]*held   // by identity hex
	bySnap  map[string]*held   // committed weight snapshot name -> its artifact
	flights map[string]*flight // resolutions in progress, by identity hex
	closed  bool
}

// held is one leased artifact: kept while a snapshot needs it or a Prepare
// is using it (pinned).
type held struct {
	hex   string
	lease *store.Lease
	snaps map[string]struct{}
	pins  int
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
		held: map[string]*held{}, bySnap: map[string]*held{}, flights: map[string]*flight{}}
}

// acquire returns the artifact of ptr, pinned (release unpins it), and the
// report of the resolution that produced it (nil when it was already held).
// Concurrent calls for one identity share one resolution, which runs on in
// the background if every caller gives up.
func (l *leases) acquire(ctx context.Context, ptr oci.Pointer) (*held, *resolve.Report, error) {
	hex := strings.TrimPrefix(ptr.Identity, "sha256:")
	l.mu.Lock()
	if h := l.held[hex]; h != nil {
		h.pins++
		l.mu.Unlock()
		return h, nil, nil
	}
	f := l.flights[hex]
	if f == nil {
		f = l.start(hex, ptr)
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
func (l *leases) prefetch(ctx context.Context, ptrs []oci.Pointer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range ptrs {
		hex := strings.TrimPrefix(p.Identity, "sha256:")
		if l.held[hex] != nil || l.flights[hex] != nil || l.closed {
			continue
		}
		l.start(hex, p)
		log.G(ctx).WithField("identity", p.Identity).WithField("artifact", p.Artifact).Debug("resolving a later weight layer ahead")
	}
}

// start starts the resolution of ptr; l.mu is held.
func (l *leases) start(hex string, ptr oci.Pointer) *flight {
	f := &flight{done: make(chan struct{})}
	l.flights[hex] = f
	go l.fly(hex, f, ptr)
	return f
}

// fly runs one resolution and hands its lease, pinned once per waiter, to
// the table.
func (l *leases) fly(hex string, f *flight, ptr oci.Pointer) {
	start := time.Now()
	res, err := l.resolver.Resolve(l.ctx, resolve.Request{Digest: ptr.Identity, Artifact: ptr.Artifact})
	l.metrics.resolved(res.Report, time.Since(start))
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.flights, hex)
	f.finished, f.report, f.err = true, res.Report, err
	if err == nil {
		switch {
		case l.closed:
			res.Close()
			f.err = fmt.Errorf("snapshotter closed: %w", errdefs.ErrUnavailable)
		case f.waiters == 0: // everyone gave up: the artifact stays in the store
			res.Close()
		default:
			f.held = &held{hex: hex, lease: res.Lease, snaps: map[string]struct{}{}, pins: f.waiters}
			l.held[hex] = f.held
			l.metrics.leasesHeld.Set(float64(len(l.held)))
		}
	}
	close(f.done)
}

// attach records that the committed snapshot name needs h.
func (l *leases) attach(h *held, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h.snaps[name] = struct{}{}
	l.bySnap[name] = h
}

// release unpins h; an artifact nothing needs any more is let go.
func (l *leases) release(h *held) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h.pins--
	l.dropIfUnused(h)
}

// detach forgets the snapshot name (removed); the last snapshot of an
// artifact lets its lease go.
func (l *leases) detach(ctx context.Context, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.bySnap[name]
	if h == nil {
		return
	}
	delete(l.bySnap, name)
	delete(h.snaps, name)
	if l.dropIfUnused(h) {
		log.G(ctx).WithField("identity", "sha256:"+h.hex).WithField("snapshot", name).Info("lease released: no snapshot needs the artifact")
	}
}

// dropIfUnused closes the lease of an artifact no snapshot and no Prepare
// needs; l.mu is held.
func (l *leases) dropIfUnused(h *held) bool {
	if h.pins > 0 || len(h.snaps) > 0 || l.held[h.hex] != h {
		return false
	}
	delete(l.held, h.hex)
	h.lease.Close()
	l.metrics.leasesHeld.Set(float64(len(l.held)))
	return true
}

// close lets every lease go.
func (l *leases) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for hex, h := range l.held {
		h.lease.Close()
		delete(l.held, hex)
	}
	clear(l.bySnap)
	l.metrics.leasesHeld.Set(0)
}

// identities are the artifacts held, for tests and inspection.
func (l *leases) identities() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for hex := range l.held {
		out = append(out, "sha256:"+hex)
	}
	return out
}
