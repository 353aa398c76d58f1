package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/snapshotter"
)

// control is a client of weightsnapd's control API.
func (a *app) control() (*snapshotter.ControlClient, error) {
	if a.cfg.Snapshotter.ControlAddress == "" {
		return nil, fmt.Errorf("[snapshotter] control_address is empty: the daemon serves no control API: %w", errdefs.ErrInvalidArgument)
	}
	return snapshotter.NewControlClient(a.cfg.Snapshotter.ControlAddress), nil
}

func newMountCmd(a *app) *cobra.Command {
	var rf remoteFlags
	var platform string
	cmd := &cobra.Command{
		Use:   "mount [ARTIFACT DIR]",
		Short: "Mount an artifact read-only on a host directory, leased by weightsnapd until umount; without arguments, list the mounts",
		Long: `Mount an artifact read-only on DIR (created if missing) for containers and
pods that take weights from a host path:

  weightsnap mount 7a1b70 /srv/models/llama
  nerdctl run -v /srv/models/llama:/models:ro IMAGE ...

ARTIFACT is an artifact of the store (digest or unique prefix), or a registry
reference to a weightsnap artifact, which weightsnapd resolves (pulls into the
store) when the store lacks it. weightsnapd makes the mount and holds the
artifact's lease until 'weightsnap umount DIR' (weightsnap rm refuses it
meanwhile), also across its own restarts.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return fmt.Errorf("mount takes an artifact and a directory, or nothing: %w", errdefs.ErrInvalidArgument)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.control()
			if err != nil {
				return err
			}
			if len(args) == 0 {
				ms, err := c.Mounts(ctx)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(ms)
				}
				tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "DIR\tIDENTITY\tLEASED\tSINCE")
				for _, m := range ms {
					fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", m.Dir, m.ID.Short(), m.Leased, m.Created.Format(time.RFC3339))
				}
				return tw.Flush()
			}
			req, err := a.mountRequest(ctx, &rf, platform, args[0], args[1])
			if err != nil {
				return err
			}
			mi, err := c.HostMount(ctx, req)
			if err != nil {
				return err
			}
			return a.printResult(mi, fmt.Sprintf("%s: %s (read-only)", mi.Dir, mi.ID))
		},
	}
	rf.register(cmd.Flags())
	cmd.Flags().StringVar(&platform, "platform", oci.HostPlatform(), "platform picked from a multi-platform reference")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}

// mountRequest turns the mount command's arguments into a request: the
// identity of a store artifact, or of a registry artifact with its
// digest-pinned reference.
func (a *app) mountRequest(ctx context.Context, rf *remoteFlags, platform, ref, dir string) (snapshotter.HostMountRequest, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return snapshotter.HostMountRequest{}, err
	}
	req := snapshotter.HostMountRequest{Dir: abs}
	if !isRemoteRef(ref) {
		d, err := a.domain(ctx)
		if err != nil {
			return req, err
		}
		req.ID, err = d.ExpandID(ref)
		return req, err
	}
	r, err := a.openRemote(ctx, rf, ref, 4)
	if err != nil {
		return req, err
	}
	info, err := oci.InspectRemote(ctx, r, oci.InspectOptions{Platform: platform, Registries: a.cfg.Resolve.AllowedRegistries()})
	if err != nil {
		return req, err
	}
	if info.Kind != "weightsnap-artifact" || info.ID.IsZero() {
		return req, fmt.Errorf("%s is a %s, not a weightsnap artifact (import a foreign artifact with weightsnap pull --revision; mount a weight image's artifacts by their own references): %w",
			ref, info.Kind, errdefs.ErrInvalidArgument)
	}
	req.Artifact = r.Name() + "@" + info.Manifest
	req.ID = info.ID
	return req, nil
}

func newUmountCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "umount DIR",
		Short: "Undo a weightsnap mount; weightsnapd lets the artifact's lease go",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.control()
			if err != nil {
				return err
			}
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if err := c.HostUnmount(cmd.Context(), dir); err != nil {
				return err
			}
			fmt.Fprintln(a.out, dir)
			return nil
		},
	}
}

// daemonHolders asks weightsnapd, briefly, what holds an artifact; nil when
// it does not answer.
func (a *app) daemonHolders(ctx context.Context, id artifact.ID) *snapshotter.Holders {
	c, err := a.control()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	h, err := c.Holders(ctx, id)
	if err != nil {
		return nil
	}
	return h
}

// holdersText says what of weightsnapd holds an artifact, or "".
func holdersText(h *snapshotter.Holders) string {
	if h == nil {
		return ""
	}
	var parts []string
	for _, m := range h.Mounts {
		parts = append(parts, "mounted at "+m)
	}
	if n := len(h.Snapshots); n > 0 {
		parts = append(parts, fmt.Sprintf("%d snapshot(s) in use", n))
	}
	if n := len(h.Pending); n > 0 {
		parts = append(parts, fmt.Sprintf("%d holder(s) waiting for a repair", n))
	}
	return strings.Join(parts, ", ")
}

// explainBusy adds to a refused removal what of weightsnapd holds it.
func (a *app) explainBusy(ctx context.Context, id artifact.ID, err error) error {
	if !errdefs.IsFailedPrecondition(err) {
		return err
	}
	if text := holdersText(a.daemonHolders(ctx, id)); text != "" {
		return fmt.Errorf("%w (weightsnapd: %s)", err, text)
	}
	return err
}
