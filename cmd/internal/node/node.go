// Package node assembles weightsnap's node side from the configuration
// file: the resolution runtime of weight layers, the snapshotter (with its
// repairs and host mounts) and its control API. weightsnapd serves it to
// containerd as a proxy snapshotter; cmd/weightsnapd/plugin compiles it
// into containerd.
package node

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/cmd/internal/version"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/snapshotter"
	"github.com/weightsnap/weightsnap/store"
)

// Node is a started node side.
type Node struct {
	Snapshotter  *snapshotter.Snapshotter
	Store        *store.Domain
	SnapshotRoot string

	control *snapshotter.ControlServer
}

// Start opens the store, starts the snapshotter at the configured snapshot
// root (taking its leases again), registers its metrics with reg (when not
// nil) and serves the control API ([snapshotter] control_address). ctx
// bounds the node's resolutions and repairs: its life.
func Start(ctx context.Context, cfg config.Config, reg prometheus.Registerer) (*Node, error) {
	rt, err := newRuntime(cfg)
	if err != nil {
		return nil, err
	}
	d, err := rt.Domain(ctx)
	if err != nil {
		return nil, err
	}
	m := snapshotter.NewMetrics()
	if reg != nil {
		if err := m.Register(reg); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if err := reg.Register(version.Get().Collector()); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	n := &Node{Store: d, SnapshotRoot: cfg.SnapshotRoot(d.Root())}
	n.Snapshotter, err = snapshotter.New(ctx, snapshotter.Config{
		Root: n.SnapshotRoot, Store: d, Resolver: rt, Mode: resolve.Mode(cfg.Snapshotter.Mode), Metrics: m,
		Retry: snapshotter.Backoff{Initial: snapshotter.DefaultRetry.Initial, Max: time.Duration(cfg.Snapshotter.RetryMaxSeconds) * time.Second},
	})
	if err != nil {
		return nil, err
	}
	if a := cfg.Snapshotter.ControlAddress; a != "" {
		if n.control, err = snapshotter.ListenControl(ctx, a, n.Snapshotter); err != nil {
			n.Snapshotter.Close()
			return nil, fmt.Errorf("control API: %w", err)
		}
	}
	log.G(ctx).WithField("store", d.Root()).WithField("snapshots", n.SnapshotRoot).WithField("mode", cfg.Snapshotter.Mode).
		WithField("control", cfg.Snapshotter.ControlAddress).Info("snapshotter started")
	return n, nil
}

// Close stops the control API and the snapshotter; host mounts stay.
func (n *Node) Close() error {
	if n.control != nil {
		n.control.Close()
	}
	return n.Snapshotter.Close()
}

// newRuntime is the resolution runtime of weight layers and host mounts:
// required mode (the snapshotter decides what a failure means), the store,
// then the weight peers ([peer] peers), then the registry a pointer names
// when its host is configured, then the configured registry repository's
// identity tags.
func newRuntime(cfg config.Config) (*resolve.Runtime, error) {
	remote := cfg.Resolve.RegistryOptions("weightsnapd")
	loc := &oci.Locator{Registries: cfg.Resolve.AllowedRegistries(), Remote: remote}
	rc := resolve.Config{
		Mode: resolve.Required, Root: cfg.Root, Store: &cfg.Store,
		Validation: store.ValidationMode(cfg.Resolve.Validation),
		Wait:       resolve.WaitPolicy{CoordinationTimeoutSeconds: cfg.Resolve.CoordinationTimeoutSeconds},
		Locate: func(ctx context.Context, ref string) (resolve.Provider, error) {
			return loc.Locate(ctx, ref)
		},
	}
	if rc.Wait.CoordinationTimeoutSeconds == 0 {
		rc.Wait.CoordinationTimeoutSeconds = cfg.Store.CoordinationTimeoutSeconds
	}
	if len(cfg.Peer.Peers) > 0 {
		fo, err := cfg.Peer.FetchOptions()
		if err != nil {
			return nil, err
		}
		rc.Peers = []resolve.Provider{&peer.Provider{Peers: cfg.Peer.Peers, Options: fo}}
	}
	if cfg.Resolve.Registry != "" {
		repo, err := registry.New(context.Background(), cfg.Resolve.Registry, remote)
		if err != nil {
			return nil, err
		}
		rc.Providers = append(rc.Providers, &oci.Provider{Repo: repo})
	}
	return resolve.New(rc)
}
