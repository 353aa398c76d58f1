package snapshotter

import (
	"context"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/weightsnap/weightsnap/internal/unixserve"
	"google.golang.org/grpc"
)

// Listen creates the socket at path (mode 0660; a stale socket is
// replaced) and registers the snapshots API for sn on it, a proxy
// plugin's; Serve serves. Calls log through ctx's logger.
func Listen(ctx context.Context, path string, sn snapshots.Snapshotter) (*unixserve.Server, error) {
	return unixserve.ListenGRPC(ctx, path, func(srv *grpc.Server) {
		snapshotsapi.RegisterSnapshotsServer(srv, snapshotservice.FromSnapshotter(sn))
	})
}
