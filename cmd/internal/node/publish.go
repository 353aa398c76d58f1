package node

import (
	"context"
	"fmt"
	"net/http"

	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/snapshotter/control"
)

// publishRoute serves POST /v1/publish on the control socket: the
// post-load publication of what a started engine made (a compile cache,
// weightsnap publish --daemon), through the daemon's runtime, so gated by
// [resolve] allow_post_load_publish. The daemon reads the directory.
func publishRoute(rt *resolve.Runtime) control.Route {
	return control.Route{Pattern: "POST /v1/publish", Fn: func(ctx context.Context, r *http.Request) (any, error) {
		var req control.PublishRequest
		if err := control.DecodeRequest(r, &req); err != nil {
			return nil, fmt.Errorf("publish request: %w", err)
		}
		return noderuntime.PublishCache(ctx, rt, req)
	}}
}
