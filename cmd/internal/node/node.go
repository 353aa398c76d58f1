// Package node is weightsnapd's wiring of a node from the configuration
// file.
//
// It opens the store through the resolution runtime (noderuntime, which
// the CLI shares) and starts the snapshotter, the prefetch manager and the
// control API. The runtime's registry client fetches with the node's
// Docker config, or with the credentials a CRI pull put in its context
// (registry.WithCredential). weightsnapd serves the snapshotter to
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
	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/cmd/internal/version"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/snapshotter"
	"github.com/weightsnap/weightsnap/store"
)

// Node is a started node side.
type Node struct {
	Snapshotter *snapshotter.Snapshotter
	Store       *store.Domain
	// Eviction is the store's eviction policy: the room of builds, the
	// watermark, the releasers.
	Eviction     *evict.Policy
	SnapshotRoot string
	// Runtime is the resolution runtime the snapshotter resolves with.
	Runtime *resolve.Runtime
	Remote  registry.Options
	// Prefetch brings the [prefetch] directory's artifacts in (nil when off).
	Prefetch *prefetch.Manager

	control *control.Server
	policy  *policyWatch
}

// Start opens the store, starts the snapshotter at the configured snapshot
// root (taking its leases again), registers its metrics with reg (when not
// nil) and serves the control API ([snapshotter] control_address). The
// snapshotter's resolutions and repairs run until Close.
func Start(ctx context.Context, cfg config.Config, reg prometheus.Registerer) (*Node, error) {
	remote := cfg.Resolve.RegistryOptions("weightsnapd")
	pw, err := newPolicyWatch(cfg.Verify.Policy)
	if err != nil {
		return nil, err
	}
	rt, err := noderuntime.NewRuntime(ctx, cfg, noderuntime.RuntimeOptions{Mode: resolve.Required, Remote: remote, Policy: pw.holder, Metrics: reg})
	if err != nil {
		return nil, err
	}
	d, err := rt.Domain(ctx)
	if err != nil {
		return nil, err
	}
	ev, err := rt.Eviction(ctx)
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
		if err := reg.Register(newStoreMetrics(d)); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if err := reg.Register(ev.Collector()); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if err := pw.register(reg); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	n := &Node{Store: d, Eviction: ev, SnapshotRoot: cfg.SnapshotRoot(d.Root()), Runtime: rt, Remote: remote, policy: pw}
	n.Snapshotter, err = snapshotter.New(ctx, snapshotter.Config{
		Root: n.SnapshotRoot, Store: d, Resolver: rt, Mode: resolve.Mode(cfg.Snapshotter.Mode), Metrics: m,
		Retry: snapshotter.Backoff{Initial: snapshotter.DefaultRetry.Initial, Max: time.Duration(cfg.Snapshotter.RetryMaxSeconds) * time.Second},
	})
	if err != nil {
		return nil, err
	}
	// An eviction first empties the artifact's unused weight snapshots, so
	// that their links give back its bytes.
	ev.SetReleaser(n.Snapshotter)
	n.Prefetch = newPrefetch(cfg, n)
	if n.Prefetch != nil && reg != nil {
		if err := n.Prefetch.Register(reg); err != nil {
			n.Snapshotter.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if a := cfg.Snapshotter.ControlAddress; a != "" {
		if n.control, err = control.Listen(ctx, a, controlServices(n.Snapshotter.HostMounts(), n.Prefetch, rt, d, ev)); err != nil {
			n.Snapshotter.Close()
			return nil, fmt.Errorf("control API: %w", err)
		}
	}
	// Read before the policy watch runs, which may change what it has seen.
	log.G(ctx).WithFields(startFields(cfg, d, pw.seen)).Info("configuration in force: the file, the policy files and their digests, the store policy")
	go ev.Watch(ctx)
	if cfg.Verify.Policy != "" {
		go pw.run(ctx)
	}
	if n.Prefetch != nil {
		go n.Prefetch.Run(ctx)
	}
	log.G(ctx).WithField("store", d.Root()).WithField("snapshots", n.SnapshotRoot).WithField("mode", cfg.Snapshotter.Mode).
		WithField("control", cfg.Snapshotter.ControlAddress).Info("snapshotter started")
	return n, nil
}

// newPrefetch makes the prefetch manager of [prefetch] (nil when its dir
// is "").
func newPrefetch(cfg config.Config, n *Node) *prefetch.Manager {
	if cfg.Prefetch.Dir == "" {
		return nil
	}
	return prefetch.New(prefetch.Config{Dir: cfg.Prefetch.Dir, Store: n.Store, Resolve: noderuntime.PrefetchResolver(cfg, n.Runtime, n.Remote),
		RetryMax: time.Duration(cfg.Prefetch.RetryMaxSeconds) * time.Second})
}

// ReloadPolicy reads the [verify] policy file again (SIGHUP) and applies
// it to every later decision. A file that fails keeps the last good policy
// and its error is returned.
func (n *Node) ReloadPolicy(ctx context.Context) error {
	return n.policy.reload(ctx, true)
}

// Close stops the control API and the snapshotter; host mounts stay.
func (n *Node) Close() error {
	if n.control != nil {
		n.control.Close()
	}
	return n.Snapshotter.Close()
}
