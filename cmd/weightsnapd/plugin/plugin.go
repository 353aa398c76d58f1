// Package plugin compiles weightsnap's snapshotter into containerd: a
// containerd main that imports this package beside containerd's builtins
// has a snapshotter plugin "weightsnap" (type io.containerd.snapshotter.v1),
// the same snapshotter weightsnapd serves as a proxy, configured by the same
// file:
//
//	import (
//		"github.com/containerd/containerd/v2/cmd/containerd/command"
//		_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
//		_ "github.com/weightsnap/weightsnap/cmd/weightsnapd/plugin"
//	)
//
// and in containerd's config:
//
//	[plugins."io.containerd.snapshotter.v1.weightsnap"]
//	  config_path = "/etc/weightsnap/config.toml"
//
// Its metrics join containerd's (the default Prometheus registry, which
// containerd's [metrics] address serves); the control API for weightsnap
// mount serves on [snapshotter] control_address as with weightsnapd;
// [snapshotter] address and [metrics] address are not used.
package plugin

import (
	"errors"
	"fmt"

	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/platforms"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/cmd/internal/node"
	"github.com/weightsnap/weightsnap/snapshotter"
)

// ID is the plugin's ID: containerd names the snapshotter by it.
const ID = "weightsnap"

// Config is the plugin's table in containerd's config,
// [plugins."io.containerd.snapshotter.v1.weightsnap"].
type Config struct {
	// ConfigPath is weightsnap's configuration file (the store root, its
	// [resolve] sources, [snapshotter] mode and root, ...).
	ConfigPath string `toml:"config_path"`
	// RootPath overrides [snapshotter] root: the snapshot directory, which
	// must be on the store's filesystem.
	RootPath string `toml:"root_path"`
}

func init() {
	registry.Register(&plugin.Registration{
		Type:   plugins.SnapshotPlugin,
		ID:     ID,
		Config: &Config{ConfigPath: config.DefaultPath},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			c, ok := ic.Config.(*Config)
			if !ok {
				return nil, errors.New("weightsnap: invalid plugin configuration")
			}
			cfg, err := config.Load(c.ConfigPath)
			if err != nil {
				return nil, err
			}
			if c.RootPath != "" {
				cfg.Snapshotter.Root = c.RootPath
			}
			n, err := node.Start(ic.Context, cfg, prometheus.DefaultRegisterer)
			if err != nil {
				return nil, fmt.Errorf("weightsnap: %w", err)
			}
			ic.Meta.Platforms = append(ic.Meta.Platforms, platforms.DefaultSpec())
			ic.Meta.Exports[plugins.SnapshotterRootDir] = n.SnapshotRoot
			return &builtin{Snapshotter: n.Snapshotter, node: n}, nil
		},
	})
}

// builtin is the snapshotter containerd holds; closing it closes the node.
type builtin struct {
	*snapshotter.Snapshotter
	node *node.Node
}

func (b *builtin) Close() error { return b.node.Close() }
