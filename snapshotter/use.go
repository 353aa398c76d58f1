package snapshotter

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
)

// What holds a lease: the snapshots that use an artifact. An active
// snapshot (a container's rootfs, an image volume's mount, a view) whose
// parent chain holds weight snapshots uses their artifacts: it takes their
// leases when it is made (Prepare, View) and lets them go when it is
// removed or committed. A committed weight snapshot alone holds none: once
// the last container of an image goes, its artifacts stay in the store,
// ready and unleased (weightsnap rm and the store's eviction may take
// them; the snapshot's files, hardlinks, keep their bytes). An image
// unpack's own Prepares (they carry containerd.io/snapshot.ref) read no
// weights and take no lease.

// lookupTimeout bounds each store lookup that takes a lease for a user.
const lookupTimeout = 30 * time.Second

// use gives the active snapshot key, just made over a parent whose chain
// (chainOf) is given, the leases of the weight snapshots in that chain.
func (s *Snapshotter) use(ctx context.Context, key string, chain []snapshots.Info) {
	for _, ptr := range weightsIn(ctx, chain) {
		s.lease(ctx, ptr, key)
	}
}

// over makes the snapshot key over parent with mk and gives it the
// leases of the weight snapshots under it (use), those first filled in
// again where Release emptied them (refill), while no Release runs: what
// is made never sees an emptied weight snapshot. Nothing is made over a
// weight snapshot whose artifact the trust policy, as it stands, refuses
// (trusted). The chain is read once a pass, for all three. An image
// unpack's Prepares (containerd.io/snapshot.ref) read no weights.
func (s *Snapshotter) over(ctx context.Context, key, parent string, labels map[string]string, mk func() ([]mount.Mount, error)) ([]mount.Mount, error) {
	if parent == "" || labels[snapshots.LabelSnapshotRef] != "" {
		return mk()
	}
	// The refilled artifacts stay leased (so neither evicted nor emptied)
	// until a pass has made the snapshot and taken its own leases.
	var held []*held
	defer func() {
		for _, h := range held {
			s.leases.finish(h)
		}
	}()
	stat := func(name string) (snapshots.Info, error) { return s.overlay.Stat(ctx, name) }
	for {
		s.gate.RLock()
		chain, err := chainOf(parent, stat)
		var emptied []snapshots.Info
		for _, info := range chain {
			if info.Kind == snapshots.KindCommitted && stateOf(info) == stateEmptied {
				emptied = append(emptied, info)
			}
		}
		if err == nil && len(emptied) == 0 {
			if err := s.trusted(ctx, chain); err != nil {
				s.gate.RUnlock()
				return nil, err
			}
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

// trusted is nil when the trust policy, as it stands, accepts the artifact
// of every weight snapshot in chain (weightsIn) under the scope of its
// pointer's artifact reference, from the store's recorded verification:
// no payload byte is read. Otherwise it is the first refusal, naming the
// weights and the scope. A policy tightened since the image was unpacked
// refuses what is made over it; one relaxed again lets it be made.
func (s *Snapshotter) trusted(ctx context.Context, chain []snapshots.Info) error {
	for _, ptr := range weightsIn(ctx, chain) {
		if err := s.leases.resolver.Trusted(ctx, ptr.ID, ptr.Artifact); err != nil {
			log.G(ctx).WithError(err).WithField("id", ptr.ID).WithField("artifact", ptr.Artifact).
				Warn("trust policy refuses the weights of an existing weight snapshot")
			return weightErr(ptr, err)
		}
	}
	return nil
}

// chainOf reads the snapshots of parent's chain with stat, parent first.
func chainOf(parent string, stat func(name string) (snapshots.Info, error)) ([]snapshots.Info, error) {
	var chain []snapshots.Info
	for name := parent; name != ""; {
		info, err := stat(name)
		if err != nil {
			return nil, err
		}
		chain = append(chain, info)
		name = info.Parent
	}
	return chain, nil
}

// weightsIn lists the pointers of the weight snapshots in chain, once per
// ID. A fallback is skipped: what runs over it started without the
// weights (its repair fills them in for the next one). A weight snapshot
// with bad labels is logged and skipped.
func weightsIn(ctx context.Context, chain []snapshots.Info) []pointer.Pointer {
	var out []pointer.Pointer
	seen := map[artifact.ID]bool{}
	for _, info := range chain {
		if st := stateOf(info); info.Kind == snapshots.KindCommitted && st != stateOrdinary && st != stateFallback {
			ptr, _, err := pointer.ParseLabels(info.Labels)
			switch {
			case err != nil:
				log.G(ctx).WithError(err).WithField("snapshot", info.Name).Error("weight snapshot with bad labels: no lease taken")
			case !seen[ptr.ID]:
				seen[ptr.ID] = true
				out = append(out, ptr)
			}
		}
	}
	return out
}

// lease gives holders the lease of ptr's artifact: the one held already,
// or one from the store alone (a lookup with manifest_and_metadata
// validation: the files were validated when they were placed), never
// waiting for a remote fetch. When the store cannot serve it now (evicted
// or removed since its weight snapshot was made) the holders keep their
// files (the snapshot's hardlinks keep
// the bytes) and are handed to the repairs, which resolve the artifact
// again (store, peers, registry) and give them its lease.
func (s *Snapshotter) lease(ctx context.Context, ptr pointer.Pointer, holders ...string) {
	if s.leases.heldNow(ptr.ID, holders...) {
		return
	}
	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	lease, err := s.store.Hold(lctx, ptr.ID, store.ManifestAndMetadata)
	cancel()
	logger := log.G(ctx).WithField("id", ptr.ID).WithField("holders", holders)
	if err != nil {
		logger.WithError(err).Warn("lease not taken: the store cannot serve the artifact now; the holders keep their files, and a repair resolves it in the background")
		s.repairs.add(ptr, holders...)
		return
	}
	s.leases.adopt(lease, holders...)
	logger.WithField("seconds", time.Since(start).Seconds()).Info("lease taken from the store")
}

// unuse forgets the active snapshot key (removed, or committed): its
// repairs, and its leases, the last user of an artifact letting it go.
func (s *Snapshotter) unuse(ctx context.Context, key string) {
	s.leases.forget(ctx, key)
}
