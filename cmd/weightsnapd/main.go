// Command weightsnapd is weightsnap's node daemon: the containerd proxy
// snapshotter that mounts the store's artifacts into containers, the CRI
// image service in front of containerd's ([cri] address), and the weight
// peer that serves them to other nodes ([peer] serve).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/cmd/internal/node"
	"github.com/weightsnap/weightsnap/cmd/internal/version"
	"github.com/weightsnap/weightsnap/cri"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/peer"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/snapshotter"
	"github.com/weightsnap/weightsnap/store"
)

// stopGrace is how long calls in flight get after SIGTERM.
const stopGrace = 10 * time.Second

func main() {
	if err := exitcode.Execute(context.Background(), newRoot()); err != nil {
		fmt.Fprintf(os.Stderr, "weightsnapd: %v\n", err)
		os.Exit(exitcode.Of(err))
	}
}

func newRoot() *cobra.Command {
	var configPath, level string
	root := &cobra.Command{
		Use:           "weightsnapd [--config FILE]",
		Short:         "weightsnap's node daemon: the containerd snapshotter for weight images",
		Args:          cobra.NoArgs,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath)
			if err != nil {
				return err
			}
			if err := log.SetLevel(level); err != nil {
				return fmt.Errorf("--log-level: %w: %w", err, errdefs.ErrInvalidArgument)
			}
			if err := log.SetFormat(log.JSONFormat); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(log.WithLogger(ctx, log.L.WithField("cmd", "weightsnapd")), cfg)
		},
	}
	config.PathFlag(root.PersistentFlags(), &configPath, "weightsnap")
	root.Flags().StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	cfgCmd := &cobra.Command{Use: "config", Short: "The configuration file"}
	cfgCmd.AddCommand(&cobra.Command{
		Use:   "default",
		Short: "Print the whole configuration file with its defaults",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			def := config.Default()
			raw, err := def.Encode()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(raw)
			return err
		},
	})
	cfgCmd.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Read the configuration file (--config) and say what is wrong with it (exit 2), and what its [store] would change in the store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return checkConfig(cmd.OutOrStdout(), configPath)
		},
	})
	root.AddCommand(cfgCmd, &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision of this build",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "weightsnapd "+version.Get().String())
		},
	})
	return root
}

// run serves until ctx ends (SIGTERM), then stops cleanly.
func run(ctx context.Context, cfg config.Config) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Resolutions and repairs outlive the Prepare that started them, not the daemon.
	n, err := node.Start(ctx, cfg, reg)
	if err != nil {
		return err
	}
	defer n.Close()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnHUP(ctx, n, hup)
	srv, err := snapshotter.Listen(ctx, cfg.Snapshotter.Address, n.Snapshotter)
	if err != nil {
		return err
	}
	errc := make(chan error, 4)
	go func() { errc <- srv.Serve() }()
	if cfg.Peer.Serve {
		stopPeer, err := servePeer(ctx, cfg.Peer, n.Store, errc)
		if err != nil {
			srv.Stop(ctx, 0)
			return err
		}
		defer stopPeer()
	}
	if cfg.Metrics.Address != "" {
		stopMetrics, err := serveMetrics(ctx, cfg.Metrics.Address, reg, errc)
		if err != nil {
			srv.Stop(ctx, 0)
			return err
		}
		defer stopMetrics()
	}
	if cfg.CRI.Address != "" {
		stopCRI, err := serveCRI(ctx, cfg, n, reg, errc)
		if err != nil {
			srv.Stop(ctx, 0)
			return err
		}
		defer stopCRI()
	}
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.G(ctx).WithError(err).Warn("sd_notify READY")
	}
	log.G(ctx).WithField("address", cfg.Snapshotter.Address).WithField("metrics", cfg.Metrics.Address).Info("serving")
	select {
	case <-ctx.Done():
		log.G(ctx).Info("stopping")
	case err = <-errc:
		log.G(ctx).WithError(err).Error("a server stopped")
	}
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	srv.Stop(ctx, stopGrace)
	return err
}

// reloadOnHUP reloads the trust policy on each signal from hup until ctx
// ends.
func reloadOnHUP(ctx context.Context, n *node.Node, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			// A failure is logged by the reload and the last good policy holds.
			_ = n.ReloadPolicy(ctx)
		}
	}
}

// servePeer serves the store to other nodes ([peer] serve) until the
// returned stop is called, which waits for the sessions to end.
func servePeer(ctx context.Context, c config.Peer, d *store.Domain, errc chan<- error) (func(), error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	if c.Unauthenticated() {
		log.G(ctx).WithField("listen", c.Listen).Warn("the weight peer serves with no token and no client certificates: any host that reaches it can read every artifact (allow_unauthenticated)")
	}
	s, err := peer.NewServer(d, cfg)
	if err != nil {
		return nil, err
	}
	lis, err := peer.Listen(ctx, c.Listen, c.TCPCongestion)
	if err != nil {
		return nil, fmt.Errorf("peer: %w", err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Serve(pctx, lis); err != nil {
			errc <- fmt.Errorf("peer: %w", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// serveCRI serves the CRI image service ([cri] address), and watches
// containerd's images for weight images another snapshotter unpacked
// ([cri] unpack_check_seconds), until the returned stop is called.
func serveCRI(ctx context.Context, cfg config.Config, n *node.Node, reg prometheus.Registerer, errc chan<- error) (func(), error) {
	svc, err := cri.New(cri.Config{Upstream: cfg.CRI.Upstream, Runtime: n.Runtime, CredentialTTL: cfg.CRI.CredentialTTL(), Mode: resolve.Mode(cfg.Snapshotter.Mode),
		Registries: cfg.Resolve.AllowedRegistries(), Remote: n.Remote, SnapshotRoot: n.SnapshotRoot})
	if err != nil {
		return nil, err
	}
	// An eviction first removes the unused CRI images that need the
	// artifact (the kubelet pulls them again with a pod's credentials),
	// then empties the weight snapshots nothing uses.
	n.Eviction.SetReleaser(evict.Releasers{svc, n.Snapshotter})
	srv, err := cri.Listen(ctx, cfg.CRI.Address, svc)
	if err != nil {
		svc.Close()
		return nil, fmt.Errorf("cri: %w", err)
	}
	go func() {
		if err := srv.Serve(); err != nil {
			errc <- fmt.Errorf("cri: %w", err)
		}
	}()
	log.G(ctx).WithField("address", cfg.CRI.Address).WithField("upstream", cfg.CRI.Upstream).Info("CRI image service started")
	wctx, stopWatch := context.WithCancel(ctx)
	if every := time.Duration(cfg.CRI.UnpackCheckSeconds) * time.Second; every > 0 {
		w, err := cri.NewUnpackWatch(svc, reg)
		if err != nil {
			stopWatch()
			srv.Stop(ctx, 0)
			svc.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		go w.Run(wctx, every)
	}
	return func() { stopWatch(); srv.Stop(ctx, stopGrace); svc.Close() }, nil
}

// serveMetrics serves /metrics on addr until the returned stop is called.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, errc chan<- error) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics: %w", err)
		}
	}()
	log.G(ctx).WithField("address", lis.Addr().String()).Debug("metrics served")
	return func() { hs.Close() }, nil
}
