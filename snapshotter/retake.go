package snapshotter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
)

// retake runs at start. It removes the short-lived snapshots a crash left
// behind, then takes again the leases of every active snapshot over weight
// snapshots (the snapshots' labels and parents are the record) and every
// host mount still mounted (its record), from the store alone (lease):
// start-up never waits for a remote fetch, and a holder whose artifact the
// store cannot serve now keeps working (its files are the store's inodes)
// and is handed to the repairs, as is every fallback snapshot. Nothing one
// snapshot does stops the others.
func (s *Snapshotter) retake(ctx context.Context) error {
	type group struct {
		ptr     pointer.Pointer
		holders []string
	}
	groups := map[artifact.ID]*group{}
	add := func(ptr pointer.Pointer, holder string) {
		g := groups[ptr.ID]
		if g == nil {
			g = &group{ptr: ptr}
			groups[ptr.ID] = g
		}
		g.holders = append(g.holders, holder)
	}
	var stale []string
	all := map[string]snapshots.Info{}
	err := s.overlay.Walk(ctx, func(ctx context.Context, info snapshots.Info) error {
		if info.Kind != snapshots.KindCommitted && (strings.HasPrefix(info.Name, tmpView+" ") || strings.HasPrefix(info.Name, tmpRepair+" ")) {
			stale = append(stale, info.Name)
			return nil
		}
		all[info.Name] = info
		return nil
	})
	if err != nil && !errdefs.IsNotFound(err) { // a new metastore has no bucket yet
		return fmt.Errorf("snapshotter: walk snapshots: %w", err)
	}
	for _, key := range stale {
		if err := s.overlay.Remove(ctx, key); err != nil {
			log.G(ctx).WithError(err).WithField("key", key).Warn("remove a snapshot a crash left behind")
		} else {
			log.G(ctx).WithField("key", key).Info("removed a snapshot a crash left behind")
		}
	}
	stat := func(name string) (snapshots.Info, error) {
		info, ok := all[name]
		if !ok {
			return info, fmt.Errorf("snapshot %s: %w", name, errdefs.ErrNotFound)
		}
		return info, nil
	}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		info := all[name]
		switch {
		case info.Kind == snapshots.KindCommitted && stateOf(info) == stateFallback:
			if ptr, _, err := pointer.ParseLabels(info.Labels); err == nil {
				s.repairs.add(ptr, name)
			}
		case info.Kind != snapshots.KindCommitted && info.Parent != "" && info.Labels[snapshots.LabelSnapshotRef] == "":
			chain, err := chainOf(info.Parent, stat)
			if err != nil {
				log.G(ctx).WithError(err).WithField("key", name).Warn("no lease taken again: the snapshot's parents cannot be read")
			}
			for _, ptr := range weightsIn(ctx, chain) {
				add(ptr, name)
			}
		}
	}
	mounts, err := s.mounts.load(ctx)
	if err != nil {
		return err
	}
	for _, mi := range mounts {
		add(pointer.Pointer{Artifact: mi.Artifact, ID: mi.ID, Target: mi.Dir}, mountHolderPrefix+mi.Dir)
	}

	ids := slices.SortedFunc(maps.Keys(groups), func(a, b artifact.ID) int { return strings.Compare(a.Hex(), b.Hex()) })
	for _, id := range ids {
		s.lease(ctx, groups[id].ptr, groups[id].holders...)
	}
	return nil
}
