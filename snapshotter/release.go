package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
)

// LabelEmptied marks a weight snapshot without its files: Release removed
// them when the store evicted its artifact, or its Prepare committed it
// and has not filled it yet (commitAndFill; a crash there leaves it so); its
// value is when (RFC 3339). Whatever is made over it next (a container's
// rootfs, a view) first resolves the artifact again and fills the
// snapshot in (refill), so nothing runs over it without its weights. Like
// LabelFallback its key is outside containerd.io/snapshot/, so no image
// can set it.
const LabelEmptied = "weightsnap/emptied"

// Release implements evict.Releaser: before the store evicts the artifact
// id, every committed weight snapshot of it is marked LabelEmptied and
// emptied, then its shared views removed, so that their hardlinks give the
// artifact's bytes back; the images stay, and their next container gets
// the weights again. It
// refuses while anything uses the artifact (an active snapshot over one of
// them, a host mount, a repair) and leaves a fallback (no weights) alone.
// Marked first, then emptied: a crash between leaves a marked snapshot the
// next use fills in again.
func (s *Snapshotter) Release(ctx context.Context, id artifact.ID) error {
	s.gate.Lock()
	defer s.gate.Unlock()
	s.fillMu.Lock() // no fill links a view of id meanwhile
	defer s.fillMu.Unlock()
	if s.holders.anyOf(id, useLeased) || s.holders.anyOf(id, useRepairing) {
		return fmt.Errorf("weight snapshots of %s: in use: %w", id.Short(), errdefs.ErrFailedPrecondition)
	}
	var full []snapshots.Info
	err := s.overlay.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Kind == snapshots.KindCommitted && info.Labels[pointer.LabelIdentity] == id.String() && stateOf(info).filled() {
			full = append(full, info)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("weight snapshots of %s: %w", id.Short(), err)
	}
	var errs []error
	for _, info := range full {
		start := time.Now()
		if err := s.empty(ctx, info); err != nil {
			errs = append(errs, fmt.Errorf("empty weight snapshot %s: %w", info.Name, err))
			continue
		}
		s.metrics.repairs.WithLabelValues("emptied").Inc()
		log.G(ctx).WithField("id", id.String()).WithField("snapshot", info.Name).WithField("seconds", time.Since(start).Seconds()).
			Info("weight snapshot emptied for the store's eviction: its next container resolves the artifact again")
	}
	if len(errs) == 0 { // no snapshot links them any more
		errs = append(errs, s.views.remove(id))
	}
	return errors.Join(errs...)
}
