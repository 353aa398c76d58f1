package snapshotter

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/pointer"
)

// A weight snapshot's states and the transitions between them. Its labels
// are the record of its state (stateOf reads them), and every change of
// state is one of the functions below:
//
//	markFallback   (none)            -> fallback  a weight layer whose artifact cannot be had (preferred mode)
//	commitAndFill  (none)            -> emptied   -> shared: a weight layer's Prepare, or its commit (detect.go)
//	empty          shared, own view  -> emptied   Release, before the store evicts the artifact
//	refill         emptied           -> shared    what is made over it next (over)
//	fillFallback   fallback          -> own view  a repair, once the artifact resolves
//	sweepViews     shared views no snapshot names are removed (Cleanup)
//
// Locks, in the order they are taken: gate, fillMu, HostMounts.mu,
// repairs.mu, leases.mu, holderTable.mu; none is taken while a later one
// is held.

// LabelFallback marks a weight snapshot whose pointer layer was unpacked
// as it is because its artifact could not be had (preferred mode). Its
// value is when, in RFC 3339. A repair fills the weights in and removes
// it. Its key is outside containerd.io/snapshot/, so no image can set it.
const LabelFallback = "weightsnap/fallback"

// LabelView names the shared view a filled weight snapshot links to, as
// <artifact hex>/<view key>. Cleanup keeps the views some snapshot names.
// Its key is outside containerd.io/snapshot/, so no image can set it.
const LabelView = "weightsnap/view"

// weightState is what a snapshot holds, as its labels say.
type weightState uint8

const (
	// stateOrdinary is a snapshot without pointer labels: an ordinary
	// layer, or an active snapshot over weight snapshots.
	stateOrdinary weightState = iota
	// stateFallback is a weight layer unpacked as it is (LabelFallback):
	// its pointer file, not its weights. A repair fills its own view in.
	stateFallback
	// stateEmptied is a weight snapshot whose directory is empty
	// (LabelEmptied): Release emptied it, or its Prepare committed it and
	// has not filled it yet. Whatever is made over it refills it first.
	stateEmptied
	// stateShared is a weight snapshot whose directory is a symbolic link
	// to the shared view LabelView names.
	stateShared
	// stateOwnView is a weight snapshot whose directory holds a view of
	// its own: a fallback its repair filled.
	stateOwnView
)

// stateOf classifies a snapshot by its labels; the caller checks its kind.
func stateOf(info snapshots.Info) weightState {
	switch l := info.Labels; {
	case l[pointer.LabelIdentity] == "":
		return stateOrdinary
	case l[LabelFallback] != "":
		return stateFallback
	case l[LabelEmptied] != "":
		return stateEmptied
	case l[LabelView] != "":
		return stateShared
	}
	return stateOwnView
}

// filled says whether a snapshot in state st holds its artifact's files.
func (st weightState) filled() bool {
	return st == stateShared || st == stateOwnView
}

// String names the state in logs and test failures.
func (st weightState) String() string {
	switch st {
	case stateOrdinary:
		return "ordinary"
	case stateFallback:
		return "fallback"
	case stateEmptied:
		return "emptied"
	case stateShared:
		return "shared"
	case stateOwnView:
		return "own view"
	}
	return fmt.Sprintf("weightState(%d)", uint8(st))
}

// markFallback is the option that marks a snapshot a fallback, from now.
func markFallback() snapshots.Opt {
	return snapshots.WithLabels(map[string]string{LabelFallback: time.Now().UTC().Format(time.RFC3339)})
}

// commitAndFill commits the active snapshot key (whose mounts are given)
// as name with opts, marked LabelEmptied, then fills it with the artifact
// in flight h at ptr's target. Containerd's commit walks the snapshot's
// files for its usage, so an empty snapshot is the cheap one to commit. A
// crash between leaves it marked, and its next use refills it. When the
// fill fails the snapshot is removed, or, when something was made over it
// meanwhile, left marked. The snapshot holds no lease: what uses it does.
// A commit error is returned as it is.
func (s *Snapshotter) commitAndFill(ctx context.Context, h *held, ptr pointer.Pointer, source string, mounts []mount.Mount,
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

// fill makes the emptied weight snapshot name, whose files are in dir,
// link to the shared view of the artifact in flight h laid out by ptr, and
// removes its LabelEmptied. The view is built first when there is none. A
// snapshot no longer emptied (filled meanwhile) is left as it is. A crash
// before the mark goes leaves it marked, dir empty or the link, which the
// next fill makes again.
func (s *Snapshotter) fill(ctx context.Context, name, dir string, ptr pointer.Pointer, h *held) error {
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	info, err := s.overlay.Stat(ctx, name)
	if err != nil || stateOf(info) != stateEmptied {
		return err
	}
	view, viewName, err := s.views.get(ctx, ptr, h.lease, s.links)
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

// empty marks the filled weight snapshot info LabelEmptied, then replaces
// its directory by an empty one. All it holds is a view: shared (its
// directory a symbolic link) or its own. The caller holds gate and fillMu.
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

// refill resolves the artifact of each emptied weight snapshot again
// (store, peers, registry) and fills the snapshot in. It returns the
// artifacts it took in flight, also when it fails; the caller ends them.
// A snapshot that cannot be refilled fails the caller: nothing runs
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
		dir, err := committedDir(ctx, s.overlay, info.Name)
		if err == nil {
			err = s.fill(ctx, info.Name, dir, ptr, h)
		}
		if err != nil {
			return hs, weightErr(ptr, fmt.Errorf("fill its emptied weight snapshot %s: %w", info.Name, err))
		}
		s.metrics.repairs.WithLabelValues("refilled").Inc()
		log.G(ctx).WithField("id", ptr.ID).WithField("snapshot", info.Name).WithField("seconds", time.Since(start).Seconds()).
			Info("emptied weight snapshot filled in again")
	}
	return hs, nil
}

// fillFallback builds a view of the artifact in flight h in the fallback
// snapshot info's own directory and removes its LabelFallback.
func (s *Snapshotter) fillFallback(ctx context.Context, info snapshots.Info, h *held) error {
	ptr, _, err := pointer.ParseLabels(info.Labels) // its own target: images may mount one artifact at different places
	if err != nil {
		return err
	}
	dir, err := committedDir(ctx, s.overlay, info.Name)
	if err != nil {
		return err
	}
	if err := buildView(ctx, filepath.Join(dir, pointer.ViewDir(ptr)), ptr, h.lease, s.links); err != nil {
		return err
	}
	info.Labels = maps.Clone(info.Labels)
	delete(info.Labels, LabelFallback)
	_, err = s.overlay.Update(ctx, info, "labels")
	return err
}

// sweepViews removes the shared views no snapshot names; an emptied
// snapshot keeps naming its view.
func (s *Snapshotter) sweepViews(ctx context.Context) error {
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	keep := map[string]bool{}
	err := s.overlay.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if v := info.Labels[LabelView]; v != "" {
			keep[v] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("shared views: %w", err)
	}
	return s.views.sweep(keep)
}
