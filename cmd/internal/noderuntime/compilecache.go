package noderuntime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// CacheIdentity is the identity a publish request's keys make: a compile
// cache bound to the model of the weight artifact req.For, which the store
// must hold (its identity is read from there). The key's fields are
// checked by the identity's validation (artifact.CacheKey).
func CacheIdentity(ctx context.Context, d *store.Domain, req control.PublishRequest) (artifact.Identity, error) {
	bad := func(format string, args ...any) (artifact.Identity, error) {
		return artifact.Identity{}, fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case req.Kind != control.KindCompileCache:
		return bad("publish kind %q: want %s", req.Kind, control.KindCompileCache)
	case req.For.IsZero():
		return bad("a compile cache needs the weight artifact it was compiled for (--for ID)")
	}
	l, err := d.Lookup(ctx, req.For, store.ManifestAndMetadata)
	if errors.Is(err, store.ErrMiss) {
		return artifact.Identity{}, fmt.Errorf("the weight artifact %s (--for) is not in the store %s: fetch it first: %w", req.For, d.Root(), errdefs.ErrNotFound)
	}
	if err != nil {
		return artifact.Identity{}, fmt.Errorf("the weight artifact %s (--for): %w", req.For, err)
	}
	weights := l.Identity()
	l.Close()
	if weights.Cache != nil {
		return bad("%s (--for) is a compile cache itself: give the weight artifact the engine loaded", req.For)
	}
	key := artifact.CacheKey{For: req.For, Engine: req.Engine, EngineVersion: req.EngineVersion, GPUArch: req.GPUArch,
		TPSize: req.TPSize, PPSize: req.PPSize, Keys: req.Keys}
	return artifact.CompileCacheIdentity(weights, key, producers.CompileCacheRef())
}

// PublishCache publishes the compile cache a request names through rt's
// post-load publication (gated by its allow_post_load_publish; a report of
// its own, which the result carries even when it failed), or, for a dry
// run, says only its identity and whether the store holds it. It never
// touches anything but the store: the engine that made the cache runs on
// whatever it answers.
func PublishCache(ctx context.Context, rt *resolve.Runtime, req control.PublishRequest) (*control.PublishResult, error) {
	d, err := rt.Domain(ctx)
	if err != nil {
		return nil, err
	}
	identity, err := CacheIdentity(ctx, d, req)
	if err != nil {
		return nil, err
	}
	id, err := identity.ID()
	if err != nil {
		return nil, err
	}
	res := &control.PublishResult{ID: id, Identity: identity}
	if req.DryRun {
		info, err := d.InspectArtifact(ctx, id)
		res.Present = err == nil && info.State == store.StateReady
		return res, nil
	}
	if !filepath.IsAbs(req.Dir) {
		return nil, fmt.Errorf("the cache directory %q is not an absolute path: %w", req.Dir, errdefs.ErrInvalidArgument)
	}
	p, err := producers.NewCompileCache(req.Dir)
	if err != nil {
		return nil, err
	}
	rep, err := rt.PublishAfterLoad(ctx, identity, p)
	if raw, jerr := rep.JSON(); jerr == nil {
		res.Report = raw
	}
	res.Present = err == nil
	return res, err
}
