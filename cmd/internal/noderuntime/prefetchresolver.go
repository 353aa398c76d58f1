package noderuntime

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/resolve"
)

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
