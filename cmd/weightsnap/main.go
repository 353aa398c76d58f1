// Command weightsnap manages a node's validated store of weight artifacts.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/containerd/log"
	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/store"
)

// Config is the CLI's configuration file (TOML), loaded once.
type Config struct {
	Root    string         `toml:"root"`
	Store   *store.Policy  `toml:"store"`
	Resolve *ResolveConfig `toml:"resolve"`
	Peer    *PeerConfig    `toml:"peer"`
}

// ResolveConfig is the [resolve] table: defaults of weightsnap resolve that
// its flags override.
type ResolveConfig struct {
	Mode                       string `toml:"mode"`
	Validation                 string `toml:"validation"`
	Registry                   string `toml:"registry"`
	PlainHTTP                  bool   `toml:"plain_http"`
	Insecure                   bool   `toml:"insecure"`
	AllowLocalBuild            *bool  `toml:"allow_local_build"`
	CoordinationTimeoutSeconds int    `toml:"coordination_timeout_seconds"`
}

// app is the state shared by every command: flags and configuration.
type app struct {
	root       string
	configPath string
	jsonOut    bool
	cfg        Config
	out        io.Writer
	errOut     io.Writer
}

func defaultRoot() string {
	if env := os.Getenv("WEIGHTSNAP_ROOT"); env != "" {
		return env
	}
	if os.Geteuid() == 0 {
		return "/var/lib/weightsnap"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "weightsnap")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "weightsnap")
}

func (a *app) load() error {
	if a.configPath == "" {
		return nil
	}
	raw, err := os.ReadFile(a.configPath)
	if errors.Is(err, os.ErrNotExist) && a.configPath == defaultConfigPath {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := toml.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a.cfg); err != nil {
		return fmt.Errorf("config %s: %w", a.configPath, err)
	}
	return nil
}

const defaultConfigPath = "/etc/weightsnap/config.toml"

// domain opens the store at the effective root.
func (a *app) domain(ctx context.Context) (*store.Domain, error) {
	root := a.root
	if root == "" {
		root = a.cfg.Root
	}
	if root == "" {
		root = defaultRoot()
	}
	return store.Open(ctx, root, a.cfg.Store)
}

// printJSON writes v as indented JSON to stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "weightsnap",
		Short:         "Validated local store of model weight artifacts",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load()
		},
	}
	root.PersistentFlags().StringVar(&a.root, "root", "", "store root (env WEIGHTSNAP_ROOT; default /var/lib/weightsnap for root, $XDG_DATA_HOME/weightsnap otherwise)")
	root.PersistentFlags().StringVar(&a.configPath, "config", defaultConfigPath, "configuration file (TOML)")
	root.AddCommand(newStoreCmd(a), newImportCmd(a), newLsCmd(a), newInspectCmd(a), newVerifyCmd(a), newRmCmd(a), newGCCmd(a), newDevCmd(a))
	root.AddCommand(newOCICmds(a)...)
	root.AddCommand(newResolveCmd(a), newPeerCmd(a))
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = log.WithLogger(ctx, log.L.WithField("cmd", "weightsnap"))
	a := &app{out: os.Stdout, errOut: os.Stderr}
	if err := newRoot(a).ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "weightsnap: %v\n", err)
		os.Exit(exitCode(err))
	}
}
