package snapshotter

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// Outcomes of a weight layer's Prepare, in logs and metrics.
const (
	OutcomeHit      = "hit"      // the artifact was in the store
	OutcomeFetched  = "fetched"  // resolution fetched it
	OutcomeHeld     = "held"     // its lease was held already (a snapshot in use, a mount, a Prepare)
	OutcomeExists   = "exists"   // the weight snapshot was already committed
	OutcomeFailed   = "failed"   // it could not resolve (required mode: Prepare fails)
	OutcomeFallback = "fallback" // it could not resolve (preferred mode: the pointer layer unpacks)
	OutcomeInvalid  = "invalid"  // its labels were refused
	OutcomeError    = "error"    // the snapshot could not be built
)

// weightErr is a weight layer whose Prepare failed: it names the artifact,
// the ID and the target (when the pointer was read), and wraps the
// cause (a *resolve.Failure, a pointer label error, or a filesystem error)
// with its errdefs class.
func weightErr(ptr pointer.Pointer, err error) error {
	if ptr.Artifact == "" {
		return fmt.Errorf("weightsnap: %w", err)
	}
	return fmt.Errorf("weightsnap: weights %s (ID %s) for %s: %w", ptr.Artifact, ptr.ID, ptr.Target, err)
}

// prepareWeights builds and commits a weight layer's snapshot and answers
// errdefs.ErrAlreadyExists; any failure leaves nothing behind. When the
// artifact cannot be had and the layer's mode is preferred, it prepares the
// layer as an ordinary one instead (containerd unpacks the pointer layer
// into it), marked a fallback for the repairs.
func (s *Snapshotter) prepareWeights(ctx context.Context, key, parent string, labels map[string]string) (_ []mount.Mount, err error) {
	start := time.Now()
	var ptr pointer.Pointer
	var fallbackCause error // why a preferred layer fell back
	outcome, source := OutcomeError, ""
	defer func() {
		s.metrics.weight(outcome, time.Since(start))
		l := log.G(ctx).WithField("id", ptr.ID).WithField("artifact", ptr.Artifact).
			WithField("target", ptr.Target).WithField("source", source).WithField("outcome", outcome).
			WithField("seconds", time.Since(start).Seconds()).WithField("key", key)
		if fallbackCause != nil {
			l.WithError(fallbackCause).WithField("then", "the pointer layer unpacks; a repair fills the weights in when the artifact resolves").
				Warn("prepare weight layer")
		} else if outcome == OutcomeFailed || outcome == OutcomeInvalid || outcome == OutcomeError {
			l.WithError(err).Warn("prepare weight layer")
		} else {
			l.Info("prepare weight layer")
		}
	}()
	ptr, _, err = pointer.ParseLabels(labels)
	if err != nil {
		outcome = OutcomeInvalid
		return nil, weightErr(pointer.Pointer{}, err)
	}
	chainID := labels[snapshots.LabelSnapshotRef]
	if chainID == "" {
		outcome = OutcomeInvalid
		return nil, weightErr(ptr, fmt.Errorf("no %s label: a weight layer is prepared by an image unpack: %w",
			snapshots.LabelSnapshotRef, errdefs.ErrInvalidArgument))
	}
	name, existing, err := s.committedName(ctx, chainID, parent)
	if err != nil {
		return nil, weightErr(ptr, err)
	}
	if existing != nil {
		outcome = OutcomeExists
		if stateOf(*existing) == stateFallback {
			// A fallback made while the node was in preferred mode: a
			// required layer must not run on it.
			if err := s.repairs.now(ctx, ptr, name, s.modeOf(ptr) == resolve.Required); err != nil {
				outcome = OutcomeFailed
				return nil, weightErr(ptr, err)
			}
		}
		return nil, fmt.Errorf("weight snapshot %s: %w", name, errdefs.ErrAlreadyExists)
	}

	s.leases.prefetch(ctx, ptr.Next)
	for first := true; ; first = false {
		h, rep, err := s.leases.acquire(ctx, ptr)
		switch {
		case err != nil && s.modeOf(ptr) == resolve.Preferred && ctx.Err() == nil:
			outcome, fallbackCause = OutcomeFallback, err
			s.metrics.fallbacks.Inc()
			mounts, perr := s.overlay.Prepare(ctx, key, parent, snapshots.WithLabels(labels), markFallback())
			if perr != nil {
				outcome = OutcomeError
				return nil, weightErr(ptr, fmt.Errorf("prepare the fallback: %w (after: %w)", perr, err))
			}
			return mounts, nil
		case err != nil:
			outcome = OutcomeFailed
			return nil, weightErr(ptr, err)
		}
		outcome, source = resolvedOutcome(rep)
		err = s.commitWeights(ctx, h, ptr, source, key, parent, name, labels)
		s.leases.finish(h) // a lease that found the artifact invalid leaves the table
		if store.IsInvalid(err) && first {
			// The store denied the artifact while its view was built:
			// the next resolution fetches it again.
			log.G(ctx).WithError(err).WithField("id", ptr.ID).WithField("key", key).
				Warn("prepare weight layer: the artifact was found invalid, resolving it again")
			continue
		}
		if errdefs.IsAlreadyExists(err) { // a concurrent Prepare of the same layer committed first
			outcome = OutcomeExists
			return nil, fmt.Errorf("weight snapshot %s: %w", name, errdefs.ErrAlreadyExists)
		}
		if err != nil {
			outcome = OutcomeError
			return nil, weightErr(ptr, err)
		}
		return nil, fmt.Errorf("weight snapshot %s committed: %w", name, errdefs.ErrAlreadyExists)
	}
}

// commitWeights commits the weight snapshot name over parent, filled with
// the artifact in flight h laid out by ptr; a failure leaves nothing
// behind.
func (s *Snapshotter) commitWeights(ctx context.Context, h *held, ptr pointer.Pointer, source, key, parent, name string, labels map[string]string) (err error) {
	tmp := fmt.Sprintf("%s %d %s", tmpView, time.Now().UnixNano(), key)
	mounts, err := s.overlay.Prepare(ctx, tmp, parent)
	if err != nil {
		return fmt.Errorf("prepare the view's snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			if rerr := s.overlay.Remove(context.WithoutCancel(ctx), tmp); rerr != nil && !errdefs.IsNotFound(rerr) { // committed, then removed by a failed fill
				log.G(ctx).WithError(rerr).WithField("key", tmp).Warn("remove an unfinished weight snapshot")
			}
		}
	}()
	return s.commitAndFill(ctx, h, ptr, source, mounts, name, tmp, snapshots.WithLabels(maps.Clone(labels)))
}

// resolvedOutcome is the outcome and source of a weight layer whose
// artifact was had through rep (nil: it was held already).
func resolvedOutcome(rep *resolve.Report) (outcome, source string) {
	switch {
	case rep == nil:
		return OutcomeHeld, resolve.SourceLocal
	case rep.Outcome == resolve.OutcomeHit:
		return OutcomeHit, rep.Source
	}
	return OutcomeFetched, rep.Source
}

// committedName is the name the weight snapshot of chainID over parent has
// or gets: the chain ID itself, or, when a snapshot over another parent
// holds that name (the same image in another containerd namespace), the
// chain ID qualified by the parent. existing is the committed snapshot of
// chainID over parent under that name, if there is one.
func (s *Snapshotter) committedName(ctx context.Context, chainID, parent string) (name string, existing *snapshots.Info, err error) {
	for _, name := range []string{chainID, chainID + "@" + parent} {
		info, err := s.overlay.Stat(ctx, name)
		if errdefs.IsNotFound(err) {
			return name, nil, nil
		}
		if err != nil {
			return "", nil, err
		}
		if info.Kind == snapshots.KindCommitted && info.Parent == parent {
			return name, &info, nil
		}
	}
	return "", nil, fmt.Errorf("snapshots named %s exist over other parents: %w", chainID, errdefs.ErrFailedPrecondition)
}

// modeOf is the mode of a weight layer: its image's, else the node's.
func (s *Snapshotter) modeOf(ptr pointer.Pointer) resolve.Mode {
	if ptr.Mode != "" {
		return resolve.Mode(ptr.Mode)
	}
	return s.mode
}
