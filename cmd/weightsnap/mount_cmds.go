package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
)

// control is a client of weightsnapd's control API.
func (a *app) control() (*control.Client, error) {
	if a.cfg.Snapshotter.ControlAddress == "" {
		return nil, fmt.Errorf("[snapshotter] control_address is empty: the daemon serves no control API: %w", errdefs.ErrInvalidArgument)
	}
	return control.NewClient(a.cfg.Snapshotter.ControlAddress), nil
}

func newMountCmd(a *app) *cobra.Command {
	var rf remoteFlags
	var platform, layout, repo string
	var writable bool
	cmd := &cobra.Command{
		Use:   "mount [--layout hf [--repo ORG/NAME]] [--writable] [ARTIFACT DIR]",
		Short: "Mount an artifact read-only (or, --writable, copy-on-write) on a host directory, leased by weightsnapd until umount; without arguments, list the mounts",
		Long: `Mount an artifact read-only on DIR (created if missing) for containers and
pods that take weights from a host path:

  weightsnap mount 7a1b70 /srv/models/llama
  nerdctl run -v /srv/models/llama:/models:ro IMAGE ...

ARTIFACT is an artifact of the store (digest or unique prefix), or a registry
reference to a weightsnap artifact, which weightsnapd resolves (pulls into the
store) when the store lacks it. weightsnapd makes the mount and holds the
artifact's lease until 'weightsnap umount DIR' (weightsnap rm refuses it
meanwhile), also across its own restarts.

With --layout hf, DIR is a Hugging Face hub cache root and the artifact is
mounted on DIR/models--ORG--NAME as the hub lays a repository out
(refs/main, snapshots/REVISION/, blobs/); several artifacts share one DIR:

  weightsnap mount --layout hf 7a1b70 /srv/hub
  nerdctl run -v /srv/hub:/hub:ro -e HF_HUB_CACHE=/hub -e HF_HUB_OFFLINE=1 IMAGE ...

ORG/NAME is the artifact's model repository, or --repo; undo it with
'weightsnap umount DIR/models--ORG--NAME'.

With --writable, DIR is an overlay over the artifact (for an engine's
compile cache, which the engine writes into): a write copies the file up
into the mount's own upper directory, so the store's files never change,
and 'weightsnap umount DIR' drops what was written:

  weightsnap mount --writable $(weightsnap publish --dry-run ...) /root/.cache/vllm`,
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
				fmt.Fprintln(tw, "DIR\tIDENTITY\tLEASED\tWRITABLE\tSINCE")
				for _, m := range ms {
					fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%s\n", m.Dir, m.ID.Short(), m.Leased, m.Writable, m.Created.Format(time.RFC3339))
				}
				return tw.Flush()
			}
			req, id, err := a.mountRequest(ctx, &rf, platform, args[0], args[1])
			if err != nil {
				return err
			}
			revision, err := a.withLayout(ctx, &req, id, layout, repo)
			if err != nil {
				return err
			}
			req.Writable = writable
			mi, err := c.HostMount(ctx, req)
			if err != nil {
				return err
			}
			access := "read-only"
			if mi.Writable {
				access = "writable: an overlay, writes kept until umount"
			}
			text := fmt.Sprintf("%s: %s (%s)", mi.Dir, mi.ID, access)
			if mi.Layout != "" {
				text = fmt.Sprintf("%s: %s (%s), %s at revision %s in the Hugging Face cache HF_HUB_CACHE=%s", mi.Dir, mi.ID, access, mi.Repo, revision, req.Dir)
			}
			return a.printResult(mi, text)
		},
	}
	rf.register(cmd.Flags())
	cmd.Flags().StringVar(&platform, "platform", oci.HostPlatform(), "platform picked from a multi-platform reference")
	cmd.Flags().StringVar(&layout, "layout", "", `"hf": DIR is a Hugging Face hub cache root, the artifact its repository folder models--ORG--NAME; "" for the artifact's own files`)
	cmd.Flags().BoolVar(&writable, "writable", false, "mount an overlay over the artifact that takes writes (a compile cache); the store's files never change, umount drops the writes")
	cmd.Flags().StringVar(&repo, "repo", "", "Hugging Face repo id ORG/NAME of --layout hf (default: the artifact's model repository)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}

// withLayout sets a mount request's layout and repo id: with layout hf,
// the repo id given, else the artifact's model repository (id, or the
// store's identity of a store artifact when id is nil), checked as the
// daemon will. It returns the identity's revision ("" with no layout).
func (a *app) withLayout(ctx context.Context, req *control.HostMountRequest, id *artifact.Identity, layout, repo string) (string, error) {
	req.Layout, req.Repo = layout, repo
	if layout == "" {
		return "", pointer.CheckLayout(layout, repo)
	}
	if id == nil {
		d, err := a.domain(ctx)
		if err != nil {
			return "", err
		}
		info, err := d.InspectArtifact(ctx, req.ID)
		if err != nil {
			return "", err
		}
		if id = info.Identity; id == nil {
			return "", fmt.Errorf("artifact %s: no identity to lay out (%s): %w", req.ID, info.State, errdefs.ErrFailedPrecondition)
		}
	}
	if req.Repo == "" {
		if req.Repo = id.Model.Repository; req.Repo == "" {
			return "", fmt.Errorf("artifact %s names no model repository: give its Hugging Face repo id with --repo ORG/NAME: %w", req.ID, errdefs.ErrInvalidArgument)
		}
	}
	return id.Model.Revision, pointer.CheckLayout(req.Layout, req.Repo)
}

// mountRequest turns the mount command's arguments into a request: the
// identity of a store artifact, or of a registry artifact with its
// digest-pinned reference, and then the registry's identity document.
func (a *app) mountRequest(ctx context.Context, rf *remoteFlags, platform, ref, dir string) (control.HostMountRequest, *artifact.Identity, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return control.HostMountRequest{}, nil, err
	}
	req := control.HostMountRequest{Dir: abs}
	if !isRemoteRef(ref) {
		d, err := a.domain(ctx)
		if err != nil {
			return req, nil, err
		}
		req.ID, err = d.ExpandID(ref)
		return req, nil, err
	}
	r, err := a.openRemote(ctx, rf, ref, 4)
	if err != nil {
		return req, nil, err
	}
	info, err := oci.InspectRemote(ctx, r, oci.InspectOptions{Platform: platform, Registries: a.cfg.Resolve.AllowedRegistries()})
	if err != nil {
		return req, nil, err
	}
	if info.Kind != "weightsnap-artifact" || info.ID.IsZero() {
		return req, nil, fmt.Errorf("%s is a %s, not a weightsnap artifact (import a foreign artifact with weightsnap pull --revision; mount a weight image's artifacts by their own references): %w",
			ref, info.Kind, errdefs.ErrInvalidArgument)
	}
	req.Artifact = r.Name() + "@" + info.Manifest
	req.ID = info.ID
	return req, info.Identity, nil
}

func newUmountCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
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
			return a.printResult(struct {
				Dir string `json:"dir"`
			}{dir}, dir)
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON: the directory unmounted")
	return cmd
}

// daemonHolders asks weightsnapd, briefly, what holds an artifact; nil when
// it does not answer.
func (a *app) daemonHolders(ctx context.Context, id artifact.ID) *control.Holders {
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
func holdersText(h *control.Holders) string {
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

// snapshotLeaseEvery is how often rm tries again while it waits for
// weightsnapd's snapshots to let an artifact's lease go.
const snapshotLeaseEvery = 100 * time.Millisecond

// removeWaiting removes id. While weightsnapd alone holds its lease and
// the daemon has no host mount of it and no repair pending (its snapshots
// hold it, or a lease is being taken or let go), it tries again until wait
// has passed: containerd removes a removed container's snapshot, and with
// it the lease, in its next garbage collection.
func (a *app) removeWaiting(ctx context.Context, d *store.Domain, id artifact.ID, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := d.Remove(ctx, id)
		var busy *store.BusyError
		if !errors.As(err, &busy) || busy.What != "lease" || !time.Now().Before(deadline) {
			return err
		}
		h := a.daemonHolders(ctx, id)
		if h == nil || !busy.HeldOnlyBy(h.PID) || len(h.Mounts) > 0 || len(h.Pending) > 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(snapshotLeaseEvery):
		}
	}
}
