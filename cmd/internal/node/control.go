package node

import (
	"context"

	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/resolve"
)

// controlServices are what weightsnapd serves on its control API: the
// snapshotter's host mounts, the prefetch entries' states (weightsnap
// prefetch ls), and the post-load publication of what a started engine
// made (weightsnap publish --daemon). A publication runs through the
// daemon's runtime, so [resolve] allow_post_load_publish gates it, and the
// daemon reads the directory.
func controlServices(mounts control.HostMounts, m *prefetch.Manager, rt *resolve.Runtime) control.Services {
	svc := control.Services{Mounts: mounts,
		Publish: func(ctx context.Context, req control.PublishRequest) (*control.PublishResult, error) {
			return noderuntime.PublishCache(ctx, rt, req)
		}}
	if m != nil {
		svc.Prefetch = func() any { return m.List() }
	}
	return svc
}
