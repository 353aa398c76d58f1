package node

import (
	"context"

	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// controlServices are what weightsnapd serves on its control API: the
// snapshotter's host mounts, the prefetch entries' states (weightsnap
// prefetch ls), the post-load publication of what a started engine made
// (weightsnap publish --daemon), and the store as its eviction policy sees
// it with evictions on demand (weightsnap ls --use, gc --evict, inspect).
// A publication runs through the daemon's runtime, so [resolve]
// allow_post_load_publish gates it, and the daemon reads the directory.
func controlServices(mounts control.HostMounts, m *prefetch.Manager, rt *resolve.Runtime, d *store.Domain, ev *evict.Policy) control.Services {
	svc := control.Services{Mounts: mounts,
		Publish: func(ctx context.Context, req control.PublishRequest) (*control.PublishResult, error) {
			return noderuntime.PublishCache(ctx, rt, req)
		},
		Store: func() control.StoreInfo { return control.StoreInfo{Root: d.Root()} },
		Use: func(ctx context.Context) (any, error) {
			return useOf(ctx, d, ev)
		},
		Evict: func(ctx context.Context, req control.EvictRequest) (any, error) {
			if req.To != nil {
				return ev.To(ctx, *req.To, req.DryRun)
			}
			return ev.ToLimits(ctx, req.DryRun)
		},
	}
	if m != nil {
		svc.Prefetch = func() any { return m.List() }
	}
	return svc
}

// useOf lists d's artifacts as the eviction policy ev sees them: what
// evicting each frees counts what the releasers let go of first.
func useOf(ctx context.Context, d *store.Domain, ev *evict.Policy) ([]*store.ArtifactInfo, error) {
	list, err := d.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, info := range list {
		info.Files = nil
		if info.Use != nil && info.State == store.StateReady {
			info.Use.Frees = ev.Frees(*info.Use)
		}
	}
	if list == nil {
		list = []*store.ArtifactInfo{}
	}
	return list, nil
}
