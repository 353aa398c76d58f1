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

// LabelFallback marks a weight snapshot whose pointer layer was unpacked as
// it is because its artifact could not be had (preferred mode); its value is
// when (RFC 3339). The repairs fill the weights in and remove it. Its key is
// outside containerd.io/snapshot/, so no image can set it.
const LabelFallback = "weightsnap/fallback"

// fallbackLabel marks a snapshot as a fallback, from now.
func fallbackLabel() snapshots.Opt {
	return snapshots.WithLabels(map[string]string{LabelFallback: time.Now().UTC().Format(time.RFC3339)})
}

// weightErr is a weight layer whose Prepare failed: it names the artifact,
// the identity and the target (when the pointer was read), and wraps the
// cause (a *resolve.Failure, a pointer label error, or a filesystem error)
// with its errdefs class.
func weightErr(ptr pointer.Pointer, err error) error {
	if ptr.Artifact == "" {
		return fmt.Errorf("weightsnap: %w", err)
	}
	return fmt.Errorf("weightsnap: weights %s (identity %s) for %s: %w", ptr.Artifact, ptr.ID, ptr.Target, err)
}

// prepareWeights builds and commits a weight layer's snapshot and answers
// errdefs.ErrAlreadyExists; any failure leaves nothing behind. When the
// artifact cannot be had and the layer's mode is preferred, it prepares the
// layer as an ordinary one instead (containerd unpacks the pointer layer
// into it), marked with LabelFallback for the repairs.
func (s *Snapshotter) prepareWeights(ctx context.Context, key, parent string, labels map[string]string) (_ []mount.Mount, err error) {
	start := time.Now()
	var ptr pointer.Pointer
	var fallbackCause error // why a preferred layer fell back
	outcome, source := OutcomeError, ""
	defer func() {
		s.metrics.weight(outcome, time.Since(start))
		l := log.G(ctx).WithField("identity", ptr.ID).WithField("artifact", ptr.Artifact).
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
		if existing.Labels[LabelFallback] != "" {
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
	h, rep, err := s.leases.acquire(ctx, ptr)
	switch {
	case err != nil && s.modeOf(ptr) == resolve.Preferred && ctx.Err() == nil:
		outcome, fallbackCause = OutcomeFallback, err
		s.metrics.fallbacks.Inc()
		mounts, perr := s.overlay.Prepare(ctx, key, parent, snapshots.WithLabels(labels), fallbackLabel())
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
	defer s.leases.release(h)

	tmp := fmt.Sprintf("%s %d %s", tmpView, time.Now().UnixNano(), key)
	mounts, err := s.overlay.Prepare(ctx, tmp, parent)
	if err != nil {
		outcome = OutcomeError
		return nil, weightErr(ptr, fmt.Errorf("prepare the view's snapshot: %w", err))
	}
	committed := false
	defer func() {
		if !committed {
			if rerr := s.overlay.Remove(context.WithoutCancel(ctx), tmp); rerr != nil && !errdefs.IsNotFound(rerr) { // committed, then removed by a failed fill
				log.G(ctx).WithError(rerr).WithField("key", tmp).Warn("remove an unfinished weight snapshot")
			}
		}
	}()
	err = s.commitView(ctx, h, ptr, source, mounts, name, tmp, snapshots.WithLabels(maps.Clone(labels)))
	if errdefs.IsAlreadyExists(err) { // a concurrent Prepare of the same layer committed first
		outcome = OutcomeExists
		return nil, fmt.Errorf("weight snapshot %s: %w", name, errdefs.ErrAlreadyExists)
	}
	if err != nil {
		outcome = OutcomeError
		return nil, weightErr(ptr, err)
	}
	committed = true
	return nil, fmt.Errorf("weight snapshot %s committed: %w", name, errdefs.ErrAlreadyExists)
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

// commitView commits the active snapshot key (whose mounts are given) as
// name with opts, marked LabelEmptied, then puts the leased artifact h at
// ptr's target in it and removes the mark (fill): containerd's commit
// walks the snapshot's files for its usage, and a view of a model of a
// thousand files is a thousand of them (the store's bytes, not the
// snapshot's). A crash between leaves it marked: the next use fills it in
// (refill). When the fill fails the snapshot is removed, or, when
// something was made over it meanwhile, left marked. The snapshot holds
// no lease (what uses it does). A commit error is returned as it is.
func (s *Snapshotter) commitView(ctx context.Context, h *held, ptr pointer.Pointer, source string, mounts []mount.Mount,
	name, key string, opts ...snapshots.Opt) error {
	dir, err := snapshotDir(mounts)
	if err != nil {
		return err
	}
	opts = append(opts, snapshots.WithLabels(map[string]string{LabelEmptied: time.Now().UTC().Format(time.RFC3339)}))
	if err := s.overlay.Commit(ctx, name, key, opts...); err != nil {
		if !errdefs.IsAlreadyExists(err) {
			err = fmt.Errorf("commit %s: %w", name, err)
		}
		return err
	}
	if err := s.fill(ctx, name, dir, ptr, h); err != nil {
		if rerr := s.overlay.Remove(context.WithoutCancel(ctx), name); rerr != nil {
			log.G(ctx).WithError(rerr).WithField("snapshot", name).Warn("remove a weight snapshot whose fill failed: it stays marked emptied, and its next use fills it in")
		}
		return fmt.Errorf("fill %s: %w", name, err)
	}
	s.metrics.viewBytes.WithLabelValues(source).Add(float64(h.lease.Index.TotalBytes()))
	return nil
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
