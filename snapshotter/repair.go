package snapshotter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
)

// repairs bring holders back to their artifact in the background, one loop
// per artifact: a fallback snapshot gets its weights (buildView into its own
// directory, then its LabelFallback removed), and an active snapshot or a
// host mount whose lease the store could not serve (at start, or since
// the store evicted the artifact) gets it. A loop resolves the
// artifact through the whole resolution order (store, peers, registry) with
// an exponential backoff, logging every failed try, until each of its
// holders is repaired or gone.
type repairs struct {
	s       *Snapshotter
	life    *life // the loops run on
	backoff Backoff

	mu    sync.Mutex
	loops map[artifact.ID]*repairLoop // by ID; its holders are those the holder table says repairing
}

// repairLoop is the repair of one artifact's holders.
type repairLoop struct {
	ptr  pointer.Pointer
	kick chan struct{} // try now
}

func newRepairs(lf *life, s *Snapshotter, b Backoff) *repairs {
	return &repairs{s: s, life: lf, backoff: b, loops: map[artifact.ID]*repairLoop{}}
}

// add queues holders for the artifact of ptr and starts its loop if none
// runs.
func (r *repairs) add(ptr pointer.Pointer, holders ...string) {
	id := ptr.ID
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.life.ctx.Err() != nil {
		return
	}
	for _, h := range holders {
		r.s.holders.set(h, id, useRepairing)
	}
	if r.loops[id] == nil {
		lp := &repairLoop{ptr: ptr, kick: make(chan struct{}, 1)}
		r.loops[id] = lp
		r.life.wg.Add(1)
		go r.run(id, lp)
	}
}

// kick makes the loop of ptr's artifact, if one waits, try now.
func (r *repairs) kick(ptr pointer.Pointer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if lp := r.loops[ptr.ID]; lp != nil {
		select {
		case lp.kick <- struct{}{}:
		default:
		}
	}
}

// pending lists the holders of the artifact id waiting for a repair.
func (r *repairs) pending(id artifact.ID) []string {
	return r.s.holders.of(id, useRepairing)
}

// now repairs the fallback snapshot name at once when its artifact
// resolves; wait says whether the caller needs that (a required layer): it
// then resolves here and fails with the reason, and otherwise only kicks
// the loop.
func (r *repairs) now(ctx context.Context, ptr pointer.Pointer, name string, wait bool) error {
	if !wait {
		r.kick(ptr)
		return nil
	}
	h, _, err := r.s.leases.acquire(ctx, ptr)
	if err != nil {
		return fmt.Errorf("the layer's snapshot is a fallback without the weights, and: %w", err)
	}
	defer r.s.leases.finish(h)
	if !r.s.holders.has(name, ptr.ID, useRepairing) { // not queued (the daemon restarted since): queue it, so repair fills it
		r.add(ptr, name)
	}
	return r.repair(name, h)
}

// run is one artifact's loop.
func (r *repairs) run(id artifact.ID, lp *repairLoop) {
	defer r.life.wg.Done()
	ctx := r.life.ctx
	logger := log.G(ctx).WithField("id", lp.ptr.ID).WithField("artifact", lp.ptr.Artifact)
	// wait is the pause before the next try: Initial, doubled after each
	// failed try up to Max, Initial again after a kick or a try that
	// repaired every holder it found (holders added meanwhile).
	bo := &backoff.ExponentialBackOff{InitialInterval: r.backoff.Initial, Multiplier: 2, MaxInterval: r.backoff.Max}
	var wait time.Duration
	restart := func() { bo.Reset(); wait = bo.NextBackOff() }
	restart()
	for try := 1; ; try++ {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-lp.kick:
			t.Stop()
			restart()
		case <-t.C:
		}
		if r.done(id, lp) {
			return
		}
		h, _, err := r.s.leases.acquire(ctx, lp.ptr)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = bo.NextBackOff()
			r.s.metrics.repairs.WithLabelValues("unresolved").Inc()
			logger.WithError(err).WithField("try", try).WithField("holders", len(r.pending(id))).WithField("next_try_seconds", wait.Seconds()).
				Warn("repair: the artifact does not resolve yet")
			continue
		}
		failed := false
		for _, holder := range r.pending(id) {
			if err := r.repair(holder, h); err != nil {
				failed = true
				r.s.metrics.repairs.WithLabelValues(OutcomeError).Inc()
				logger.WithError(err).WithField("holder", holder).Error("repair failed")
			}
		}
		r.s.leases.finish(h)
		if r.done(id, lp) {
			return
		}
		if failed {
			wait = bo.NextBackOff()
		} else {
			restart()
		}
	}
}

// done ends the loop of id when it has no holder left (all repaired, or
// gone while it waited).
func (r *repairs) done(id artifact.ID, lp *repairLoop) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s.holders.anyOf(id, useRepairing) {
		return false
	}
	delete(r.loops, id)
	return true
}

// repair brings one holder to the leased artifact h: a fallback snapshot
// gets its weights; an active snapshot (a user) or a host mount gets the
// lease, a committed weight snapshot none (what uses it does). Only a
// holder still pending (not removed meanwhile) is repaired.
func (r *repairs) repair(holder string, h *held) error {
	ctx := r.life.ctx
	filled, leased := false, true
	if !strings.HasPrefix(holder, mountHolderPrefix) {
		info, err := r.s.overlay.Stat(ctx, holder)
		if err == nil {
			leased = info.Kind != snapshots.KindCommitted
			if stateOf(info) == stateFallback {
				filled, err = true, r.s.fillFallback(ctx, info, h)
			}
		}
		if errdefs.IsNotFound(err) { // gone meanwhile
			r.s.leases.forget(ctx, holder)
			return nil
		}
		if err != nil {
			return err
		}
	}
	// h is in flight: its lease stays while the holder takes it.
	if !r.s.holders.promote(holder, h.id, leased) {
		return nil
	}
	logger := log.G(ctx).WithField("id", h.id.String()).WithField("holder", holder)
	switch {
	case filled:
		r.s.metrics.repairs.WithLabelValues("filled").Inc()
		logger.Info("repair: weights filled in")
	case leased:
		r.s.metrics.repairs.WithLabelValues("leased").Inc()
		logger.Info("repair: lease taken again")
	}
	return nil
}
