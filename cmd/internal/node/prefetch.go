package node

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/snapshotter"
)

// newPrefetch makes the prefetch manager of [prefetch] (nil when its dir
// is "").
func newPrefetch(cfg config.Config, n *Node) *prefetch.Manager {
	if cfg.Prefetch.Dir == "" {
		return nil
	}
	return prefetch.New(prefetch.Config{Dir: cfg.Prefetch.Dir, Store: n.Store, Resolve: PrefetchResolver(cfg, n.Runtime, n.Remote),
		RetryMax: time.Duration(cfg.Prefetch.RetryMaxSeconds) * time.Second})
}

// PrefetchResolver resolves prefetch entries as the CRI resolves an
// artifact pull: the store, the weight peers, then the registry the
// reference names (one of [resolve] registries); an identity alone, the
// store and the peers.
func PrefetchResolver(cfg config.Config, rt *resolve.Runtime, remote registry.Options) prefetch.Resolver {
	registries := cfg.Resolve.AllowedRegistries()
	return func(ctx context.Context, e prefetch.Declared) (artifact.ID, error) {
		if e.Ref == "" {
			res, err := rt.Resolve(ctx, resolve.Request{ID: e.ID})
			if err != nil {
				return artifact.ID{}, err
			}
			defer res.Close()
			return e.ID, nil
		}
		ref, err := registry.ParseReference(e.Ref)
		if err != nil {
			return artifact.ID{}, err
		}
		if !oci.AllowedHost(registries, ref.Registry) {
			return artifact.ID{}, fmt.Errorf("registry %s is not among [resolve] registries: %w", ref.Registry, errdefs.ErrPermissionDenied)
		}
		r, err := registry.New(ctx, e.Ref, remote)
		if err != nil {
			return artifact.ID{}, err
		}
		found, isArtifact, err := oci.FetchArtifact(ctx, r)
		if err != nil {
			return artifact.ID{}, err
		}
		if !isArtifact {
			return artifact.ID{}, fmt.Errorf("%s is not a weight artifact: %w", e.Ref, errdefs.ErrInvalidArgument)
		}
		plan, err := oci.PlanArtifact(ctx, r, found)
		if err != nil {
			return artifact.ID{}, err
		}
		id, err := plan.Identity.ID()
		if err != nil {
			return artifact.ID{}, err
		}
		res, err := rt.Resolve(ctx, resolve.Request{Identity: &plan.Identity, Artifact: r.Name() + "@" + found.Desc.Digest.String()})
		if err != nil {
			return artifact.ID{}, err
		}
		defer res.Close()
		return id, nil
	}
}

// prefetchRoute serves GET /v1/prefetch on the control socket: every
// entry's state (weightsnap prefetch ls).
func prefetchRoute(m *prefetch.Manager) snapshotter.ControlRoute {
	return snapshotter.ControlRoute{Pattern: "GET /v1/prefetch", Fn: func(context.Context, *http.Request) (any, error) {
		if m == nil {
			return []prefetch.Status{}, nil
		}
		return m.List(), nil
	}}
}
