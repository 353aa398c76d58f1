// Command weightsnap manages a node's validated store of weight artifacts.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/containerd/log"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/cmd/internal/version"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/store"
)

// app is the state shared by every command: flags and configuration.
type app struct {
	root       string
	configPath string
	// controlAddress is --control-address: weightsnapd's control socket,
	// over the configuration's.
	controlAddress string
	jsonOut        bool
	cfg            config.Config
	out            io.Writer
	errOut         io.Writer
}

func (a *app) load() (err error) {
	a.cfg, err = config.Load(a.configPath)
	if a.controlAddress != "" {
		a.cfg.Snapshotter.ControlAddress = a.controlAddress
	}
	return err
}

// effectiveRoot is the store root: --root, else $WEIGHTSNAP_ROOT, else the
// file's root, else the default (config.Load puts the last three in
// a.cfg.Root).
func (a *app) effectiveRoot() string {
	if a.root != "" {
		return a.root
	}
	return a.cfg.Root
}

// domain opens the store at the effective root, and says so when that
// created it. Its builds make room with its eviction policy.
func (a *app) domain(ctx context.Context) (*store.Domain, error) {
	d, err := a.openDomain(ctx, store.Open)
	if err != nil {
		return nil, err
	}
	ev, err := evict.New(d)
	if err != nil {
		return nil, err
	}
	d.SetRoomMaker(ev)
	if d.Created() {
		p := d.Policy()
		fmt.Fprintf(a.errOut, "weightsnap: created a store domain at %s (validation %s, coordination timeout %ds; [store] in the configuration file and `weightsnap store init` change its policy)\n",
			d.Root(), p.Validation, p.CoordinationTimeoutSeconds)
	}
	return d, nil
}

// existingDomain opens the store at the effective root for a command that
// only reads it: a root that holds no store is not found (exit 3), and
// nothing is created there.
func (a *app) existingDomain(ctx context.Context) (*store.Domain, error) {
	return a.openDomain(ctx, store.OpenExisting)
}

// openDomain opens the store at the effective root with open (store.Open
// or store.OpenExisting), creating it with the configuration's [store], and
// applies the file's [store] to it.
func (a *app) openDomain(ctx context.Context, open func(context.Context, string, *store.Policy) (*store.Domain, error)) (*store.Domain, error) {
	d, err := open(ctx, a.effectiveRoot(), &a.cfg.Store)
	if err != nil {
		return nil, err
	}
	if err := a.cfg.ApplyStore(ctx, d); err != nil {
		return nil, err
	}
	return d, nil
}

// printJSON writes v as indented JSON to stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// artifactRef names an artifact in a command's JSON: its hex as the
// store's directory is named, and its digest.
type artifactRef struct {
	Hex string      `json:"id"`
	ID  artifact.ID `json:"digest"`
}

func refOf(id artifact.ID) artifactRef { return artifactRef{Hex: id.Hex(), ID: id} }

// printResult ends a command that made one thing: v as JSON with --json,
// else line, which names what was made.
func (a *app) printResult(v any, line string) error {
	if a.jsonOut {
		return a.printJSON(v)
	}
	_, err := fmt.Fprintln(a.out, line)
	return err
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "weightsnap",
		Short:         "Validated local store of model weight artifacts",
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load()
		},
	}
	root.PersistentFlags().StringVar(&a.root, "root", "", "store root (over $WEIGHTSNAP_ROOT, over root in the configuration file; default /var/lib/weightsnap for root, $XDG_DATA_HOME/weightsnap otherwise)")
	config.PathFlag(root.PersistentFlags(), &a.configPath, "weightsnapd")
	root.PersistentFlags().StringVar(&a.controlAddress, "control-address", "", "weightsnapd's control socket (default [snapshotter] control_address of the configuration file)")
	root.AddCommand(newStoreCmd(a), newImportCmd(a), newLsCmd(a), newInspectCmd(a), newVerifyCmd(a), newRmCmd(a), newGCCmd(a), newDevCmd(a))
	root.AddCommand(newPinCmd(a), newUnpinCmd(a), newPrefetchCmd(a))
	root.AddCommand(newOCICmds(a)...)
	root.AddCommand(newResolveCmd(a), newPeerCmd(a), newPublishCmd(a))
	root.AddCommand(newMountCmd(a), newUmountCmd(a))
	root.AddCommand(newStageCmd(a), newStagingCmd(a))
	root.AddCommand(newVersionCmd(a), newVerifyPolicyCmd(a), newVerifySignatureCmd(a))
	return root
}

func main() {
	ctx, signalled, stop := withSignals(context.Background())
	ctx = log.WithLogger(ctx, log.L.WithField("cmd", "weightsnap"))
	a := &app{out: os.Stdout, errOut: os.Stderr}
	root := newRoot(a)
	err := misplacedFlag(root, os.Args[1:])
	if err == nil {
		err = exitcode.Execute(ctx, root)
	}
	stop()
	if sig := signalled(); sig != 0 && err != nil {
		os.Exit(interruptedExit(os.Stderr, sig, err))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "weightsnap: %v\n", err)
		sayKept(os.Stderr, err)
		os.Exit(exitcode.Of(err))
	}
}

// newVersionCmd prints the build: module version, VCS revision, Go version.
func newVersionCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision of this build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version.Get()
			return a.printResult(v, "weightsnap "+v.String())
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}
