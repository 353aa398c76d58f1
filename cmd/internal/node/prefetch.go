package node

import (
	"context"
	"net/http"
	"time"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/snapshotter/control"
)

// newPrefetch makes the prefetch manager of [prefetch] (nil when its dir
// is "").
func newPrefetch(cfg config.Config, n *Node) *prefetch.Manager {
	if cfg.Prefetch.Dir == "" {
		return nil
	}
	return prefetch.New(prefetch.Config{Dir: cfg.Prefetch.Dir, Store: n.Store, Resolve: noderuntime.PrefetchResolver(cfg, n.Runtime, n.Remote),
		RetryMax: time.Duration(cfg.Prefetch.RetryMaxSeconds) * time.Second})
}

// prefetchRoute serves GET /v1/prefetch on the control socket: every
// entry's state (weightsnap prefetch ls).
func prefetchRoute(m *prefetch.Manager) control.Route {
	return control.Route{Pattern: "GET /v1/prefetch", Fn: func(context.Context, *http.Request) (any, error) {
		if m == nil {
			return []prefetch.Status{}, nil
		}
		return m.List(), nil
	}}
}
