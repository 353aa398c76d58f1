// Package noderuntime is the resolution runtime the configuration describes,
// shared by the weightsnap CLI and weightsnapd.
//
// NewRuntime is its one constructor. PrefetchResolver and PublishCache are
// the work both programs run through it: resolving a prefetch entry, and
// publishing a compile cache after a load. The daemon's wiring is
// cmd/internal/node's.
package noderuntime

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// RuntimeOptions are what a program adds to the runtime the configuration
// describes.
type RuntimeOptions struct {
	// Mode is the resolution mode: the daemon's is required (the
	// snapshotter decides what a failure means); weightsnap resolve's is
	// [resolve] mode.
	Mode resolve.Mode
	// Remote are the registry client options: cfg.Resolve.RegistryOptions,
	// with a command's flags over them.
	Remote registry.Options
	// Producers are the registered local producers.
	Producers []producers.Local
	// NoFingerprintCache hashes every source file instead of using the cache.
	NoFingerprintCache bool
	// Policy is where every decision reads the trust policy: weightsnapd's
	// reloads it. nil reads [verify] policy once.
	Policy trust.Source
	// Metrics, when set, registers the runtime's metrics: the weight
	// peers' count of peers that failed to answer.
	Metrics prometheus.Registerer
}

// NewRuntime is the resolution runtime of the configuration, the one
// weightsnap resolve, weightsnapd and the containerd plugin use: the store
// at cfg.Root (its policy [store], recorded there each time the runtime
// opens it; lookups as [resolve] validation; waits
// bounded by [resolve] or else [store] coordination_timeout_seconds), then
// the weight peers ([peer] peers, fetched from as the [peer] table says),
// then the registry a request's artifact reference (a weight image's
// pointer) names when its host is allowed ([resolve] registries), then
// the identity tags of [resolve] registry, then the local producers when
// [resolve] allow_local_build (and post-load publication when [resolve]
// allow_post_load_publish), all under the trust policy ([verify]
// policy: oci.Gate). In disabled mode it has no remote source.
// The caller sets the file's values its flags override in cfg first.
func NewRuntime(ctx context.Context, cfg config.Config, o RuntimeOptions) (*resolve.Runtime, error) {
	rc := resolve.Config{
		Mode: o.Mode, Root: cfg.Root, Store: &cfg.Store, Opened: cfg.ApplyStore, Validation: store.ValidationMode(cfg.Resolve.Validation),
		Wait:            resolve.WaitPolicy{CoordinationTimeoutSeconds: cfg.Resolve.CoordinationTimeoutSeconds},
		AllowLocalBuild: cfg.Resolve.AllowLocalBuild, NoFingerprintCache: o.NoFingerprintCache, Producers: o.Producers,
		AllowPostLoadPublish: cfg.Resolve.AllowPostLoadPublish,
	}
	if rc.Wait.CoordinationTimeoutSeconds == 0 {
		rc.Wait.CoordinationTimeoutSeconds = cfg.Store.CoordinationTimeoutSeconds
	}
	if o.Mode == resolve.Disabled {
		return resolve.New(rc)
	}
	// Resolution publishes from registries and peers under the trust
	// policy: the registry providers check it before any payload byte, the
	// gate (rc.Trust) keeps what they verified, re-checks it on a store
	// hit, and keeps unsigned sources away from what it wants signed.
	pol := o.Policy
	if pol == nil {
		p, err := cfg.Verify.LoadPolicy()
		if err != nil {
			return nil, err
		}
		pol = p
	}
	rc.Trust = &oci.Gate{Policy: pol, Default: cfg.Resolve.Registry}
	loc := &oci.Locator{Registries: cfg.Resolve.AllowedRegistries(), ConfigFile: cfg.Path, Remote: o.Remote, Policy: pol}
	rc.Locate = func(ctx context.Context, ref string) (resolve.Provider, error) {
		return loc.Locate(ctx, ref)
	}
	var wp *peer.Provider
	if len(cfg.Peer.Peers) > 0 {
		fo, err := cfg.Peer.FetchOptions()
		if err != nil {
			return nil, err
		}
		p := &peer.Provider{Peers: cfg.Peer.Peers, Options: fo, Self: cfg.Peer.Self(), SlowAfter: cfg.Peer.SlowAfter()}
		if o.Metrics != nil {
			if err := p.Register(o.Metrics); err != nil {
				return nil, fmt.Errorf("metrics: %w", err)
			}
		}
		rc.Peers, wp = []resolve.Provider{p}, p
	}
	if cfg.Resolve.Registry != "" {
		repo, err := registry.New(ctx, cfg.Resolve.Registry, o.Remote)
		if err != nil {
			return nil, err
		}
		rc.Providers = append(rc.Providers, &oci.Provider{Repo: repo, Options: oci.PullOptions{Policy: pol}})
	}
	rt, err := resolve.New(rc)
	if err != nil {
		return nil, err
	}
	// The weight peer marks what it looks for in the runtime's store, which
	// the node's peer lists.
	if wp != nil {
		wp.Wants = func(ctx context.Context, id artifact.ID) (func(), error) {
			d, err := rt.Domain(ctx)
			if err != nil {
				return nil, err
			}
			return d.Want(id)
		}
	}
	return rt, nil
}
