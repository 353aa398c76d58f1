package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
)

// LabelEmptied marks a weight snapshot without its files: Release removed
// them when the store evicted its artifact, or its Prepare committed it
// and has not filled it yet (commitView; a crash there leaves it so); its
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
		if info.Kind == snapshots.KindCommitted && info.Labels[pointer.LabelIdentity] == id.String() &&
			info.Labels[LabelFallback] == "" && info.Labels[LabelEmptied] == "" {
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
		log.G(ctx).WithField("identity", id.String()).WithField("snapshot", info.Name).WithField("seconds", time.Since(start).Seconds()).
			Info("weight snapshot emptied for the store's eviction: its next container resolves the artifact again")
	}
	if len(errs) == 0 { // no snapshot links them any more
		errs = append(errs, s.views.remove(id))
	}
	return errors.Join(errs...)
}

// empty marks the committed weight snapshot info LabelEmptied, then
// replaces its directory by an empty one: all it holds is a view, shared
// (its directory a symbolic link) or its own (buildView's, filled before
// views were shared, or by a repair).
func (s *Snapshotter) empty(ctx context.Context, info snapshots.Info) error {
	info.Labels = maps.Clone(info.Labels)
	info.Labels[LabelEmptied] = time.Now().UTC().Format(time.RFC3339) // LabelView stays: Cleanup keeps the view while dir may link to it
	if _, err := s.overlay.Update(ctx, info, "labels"); err != nil {
		return err
	}
	dir, err := committedDir(ctx, s.overlay, info.Name)
	if err != nil {
		return err
	}
	return swapIn(dir, ".weightsnap-empty", func(tmp string) error { return os.Mkdir(tmp, 0o755) })
}

// over makes the snapshot key over parent with mk and gives it the
// leases of the weight snapshots under it (use), those first filled in
// again where Release emptied them (refill), while no Release runs: what
// is made never sees an emptied weight snapshot. The chain is read once
// a pass, for both. An image unpack's
// Prepares (containerd.io/snapshot.ref) read no weights.
func (s *Snapshotter) over(ctx context.Context, key, parent string, labels map[string]string, mk func() ([]mount.Mount, error)) ([]mount.Mount, error) {
	if parent == "" || labels[snapshots.LabelSnapshotRef] != "" {
		return mk()
	}
	// The refilled artifacts stay leased (so neither evicted nor emptied)
	// until a pass has made the snapshot and taken its own leases.
	var held []*held
	defer func() {
		for _, h := range held {
			s.leases.release(h)
		}
	}()
	stat := func(name string) (snapshots.Info, error) { return s.overlay.Stat(ctx, name) }
	for {
		s.gate.RLock()
		chain, err := chainOf(parent, stat)
		var emptied []snapshots.Info
		for _, info := range chain {
			if info.Kind == snapshots.KindCommitted && info.Labels[LabelEmptied] != "" {
				emptied = append(emptied, info)
			}
		}
		if err == nil && len(emptied) == 0 {
			m, err := mk()
			if err == nil {
				s.use(ctx, key, chain)
			}
			s.gate.RUnlock()
			return m, err
		}
		s.gate.RUnlock()
		if err != nil {
			return nil, fmt.Errorf("the parents of %s: %w", key, err)
		}
		hs, err := s.refill(ctx, emptied)
		held = append(held, hs...)
		if err != nil {
			return nil, err
		}
	}
}

// refill resolves the artifact of each emptied weight snapshot again
// (store, peers, registry) and links it in, then removes the mark; it
// returns the leases it took, also when it fails (the caller releases
// them). A snapshot that cannot be filled fails the caller: nothing runs
// without its weights.
func (s *Snapshotter) refill(ctx context.Context, emptied []snapshots.Info) ([]*held, error) {
	var hs []*held
	for _, info := range emptied {
		start := time.Now()
		ptr, _, err := pointer.ParseLabels(info.Labels)
		if err != nil {
			return hs, weightErr(ptr, err)
		}
		h, _, err := s.leases.acquire(ctx, ptr)
		if err != nil {
			return hs, weightErr(ptr, fmt.Errorf("its weight snapshot was emptied when the store evicted the artifact, and it does not resolve again: %w", err))
		}
		hs = append(hs, h)
		if err := s.fillEmptied(ctx, info.Name, ptr, h); err != nil {
			return hs, weightErr(ptr, fmt.Errorf("fill its emptied weight snapshot %s: %w", info.Name, err))
		}
		log.G(ctx).WithField("identity", ptr.ID).WithField("snapshot", info.Name).WithField("seconds", time.Since(start).Seconds()).
			Info("emptied weight snapshot filled in again")
	}
	return hs, nil
}

// fillEmptied links the leased artifact h into the emptied weight snapshot
// name, unless another refill did meanwhile.
func (s *Snapshotter) fillEmptied(ctx context.Context, name string, ptr pointer.Pointer, h *held) error {
	dir, err := committedDir(ctx, s.overlay, name)
	if err != nil {
		return err
	}
	if err := s.fill(ctx, name, dir, ptr, h); err != nil {
		return err
	}
	s.metrics.repairs.WithLabelValues("refilled").Inc()
	return nil
}

// fill makes the committed weight snapshot name, whose files are in dir,
// the shared view of the leased artifact h laid out by ptr (sharedViews:
// dir becomes a symbolic link to it, the view built first when there is
// none), and removes its LabelEmptied; one marked no more (filled
// meanwhile) is left as it is. A crash before the mark goes leaves it
// marked, dir as it was or the link, which the next fill makes again.
func (s *Snapshotter) fill(ctx context.Context, name, dir string, ptr pointer.Pointer, h *held) error {
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	info, err := s.overlay.Stat(ctx, name)
	if err != nil || info.Labels[LabelEmptied] == "" {
		return err
	}
	view, viewName, err := s.views.get(ptr, h.lease, s.links)
	if err != nil {
		return err
	}
	if err := swapIn(dir, ".weightsnap-link", func(tmp string) error { return os.Symlink(view, tmp) }); err != nil { // emptied: nothing in dir is anybody's
		return fmt.Errorf("link the shared view: %w", err)
	}
	info.Labels = maps.Clone(info.Labels)
	delete(info.Labels, LabelEmptied)
	info.Labels[LabelView] = viewName
	_, err = s.overlay.Update(ctx, info, "labels")
	return err
}
