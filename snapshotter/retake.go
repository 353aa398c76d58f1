package snapshotter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
)

// retakeTimeout bounds each store lookup at start.
const retakeTimeout = 30 * time.Second

// retake runs at start. It removes the short-lived snapshots a crash left
// behind, then takes again the lease of every committed weight snapshot (its
// labels are the record) and every host mount still mounted (its record),
// from the store alone (a lookup with manifest_and_metadata validation: the
// files in place were validated when they were placed). Start-up never waits
// for a remote fetch: a holder whose artifact the store cannot serve now
// keeps working (its files are the store's inodes) and is handed to the
// repairs, as is every fallback snapshot; a snapshot with bad labels is
// logged and left alone. Nothing one snapshot does stops the others.
func (s *Snapshotter) retake(ctx context.Context) error {
	type group struct {
		ptr      pointer.Pointer
		holders  []string // to lease now
		fallback []string // to fill in
	}
	groups := map[artifact.ID]*group{}
	add := func(ptr pointer.Pointer, holder string, fallback bool) {
		id := ptr.Identity
		g := groups[id]
		if g == nil {
			g = &group{ptr: ptr}
			groups[id] = g
		}
		if fallback {
			g.fallback = append(g.fallback, holder)
		} else {
			g.holders = append(g.holders, holder)
		}
	}
	var stale []string
	err := s.overlay.Walk(ctx, func(ctx context.Context, info snapshots.Info) error {
		if info.Kind != snapshots.KindCommitted {
			if strings.HasPrefix(info.Name, tmpView+" ") || strings.HasPrefix(info.Name, tmpRepair+" ") {
				stale = append(stale, info.Name)
			}
			return nil
		}
		if info.Labels[pointer.LabelIdentity] == "" {
			return nil
		}
		ptr, _, err := pointer.ParseLabels(info.Labels)
		if err != nil {
			log.G(ctx).WithError(err).WithField("snapshot", info.Name).Error("weight snapshot with bad labels: no lease taken")
			return nil
		}
		add(ptr, info.Name, info.Labels[LabelFallback] != "")
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
	mounts, err := s.mounts.load(ctx)
	if err != nil {
		return err
	}
	for _, mi := range mounts {
		add(pointer.Pointer{Artifact: mi.Artifact, Identity: mi.Identity, Target: mi.Dir}, mountHolderPrefix+mi.Dir, false)
	}
	s.metrics.hostMounts.Set(float64(len(mounts)))

	ids := slices.SortedFunc(maps.Keys(groups), func(a, b artifact.ID) int { return strings.Compare(a.Hex(), b.Hex()) })
	for _, id := range ids {
		g := groups[id]
		if len(g.fallback) > 0 {
			s.repairs.add(g.ptr, g.fallback...)
		}
		if len(g.holders) == 0 {
			continue
		}
		start := time.Now()
		lctx, cancel := context.WithTimeout(ctx, retakeTimeout)
		lease, err := s.store.Lookup(lctx, id, store.ManifestAndMetadata)
		cancel()
		logger := log.G(ctx).WithField("identity", g.ptr.Identity).WithField("holders", g.holders)
		if err != nil {
			logger.WithError(err).Warn("lease not taken again: the store cannot serve the artifact now; the holders keep their files, and a repair resolves it in the background")
			s.repairs.add(g.ptr, g.holders...)
			continue
		}
		s.leases.adopt(lease, g.holders...)
		logger.WithField("seconds", time.Since(start).Seconds()).Info("lease taken again")
	}
	return nil
}
