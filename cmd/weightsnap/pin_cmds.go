package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/noderuntime"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/oci"
	"github.com/weightsnap/weightsnap/prefetch"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

func newPinCmd(a *app) *cobra.Command {
	var rf remoteFlags
	var reason string
	cmd := &cobra.Command{
		Use:   "pin REF|ID",
		Short: "Pin an artifact: eviction never takes it and rm refuses it; a registry reference the store lacks is pulled first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			open := a.existingDomain
			if isReference(args[0]) {
				open = a.domain
			}
			d, err := open(ctx)
			if err != nil {
				return err
			}
			id, err := a.storeOrPull(ctx, d, &rf, args[0])
			if err != nil {
				return err
			}
			if err := d.Pin(ctx, id, store.Pin{By: store.PinByCLI, Reason: reason, Ref: args[0]}); err != nil {
				return err
			}
			return a.printResult(refOf(id), id.Hex())
		},
	}
	rf.register(cmd.Flags())
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON: the artifact pinned")
	cmd.Flags().StringVar(&reason, "reason", "", "why it is pinned (shown by ls --use, inspect and capacity errors)")
	return cmd
}

// unpinResult is what unpin did to one artifact (an element of unpin
// --json's list): how many pins it dropped, and the pins that stay.
type unpinResult struct {
	artifactRef
	Dropped     int         `json:"dropped"`
	StillPinned []store.Pin `json:"still_pinned"`
}

func newUnpinCmd(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "unpin ID...",
		Short: "Drop the pins weightsnap pin set (--all: every holder's, the prefetch files' too); the artifact stays",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.existingDomain(cmd.Context())
			if err != nil {
				return err
			}
			by := store.PinByCLI
			if all {
				by = ""
			}
			var errs []error
			unpinned := []unpinResult{}
			for _, ref := range args {
				id, err := d.ExpandID(ref)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ref, err))
					continue
				}
				n, err := d.Unpin(cmd.Context(), id, by)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ref, err))
					continue
				}
				pins, _ := d.Pins(id)
				r := unpinResult{artifactRef: refOf(id), Dropped: n, StillPinned: pins}
				if r.StillPinned == nil {
					r.StillPinned = []store.Pin{}
				}
				unpinned = append(unpinned, r)
				switch {
				case a.jsonOut:
				case len(pins) > 0:
					fmt.Fprintf(a.out, "%s\tstill pinned by %s\n", id.Hex(), pinHolders(pins))
				case n > 0:
					fmt.Fprintln(a.out, id.Hex())
				}
			}
			if a.jsonOut {
				if err := a.printJSON(unpinned); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "drop every holder's pins, not only the CLI's")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON: for each artifact, the pins dropped and those that stay")
	return cmd
}

// storeOrPull names an artifact of the store (a digest or a unique prefix),
// else pulls a registry reference into it.
func (a *app) storeOrPull(ctx context.Context, d *store.Domain, rf *remoteFlags, ref string) (artifact.ID, error) {
	id, err := d.ExpandID(ref)
	if err == nil || !isReference(ref) {
		return id, err
	}
	r, err := a.openRemote(ctx, rf, ref, oci.DefaultConcurrency)
	if err != nil {
		return artifact.ID{}, err
	}
	pol, err := a.cfg.Verify.LoadPolicy()
	if err != nil {
		return artifact.ID{}, err
	}
	l, _, err := oci.Pull(ctx, d, r, oci.PullOptions{Concurrency: oci.DefaultConcurrency, Policy: pol})
	if err != nil {
		return artifact.ID{}, err
	}
	defer l.Close()
	return l.ID, nil
}

// invalidFiles is a bad-input error naming the prefetch files of list that
// cannot be read or parsed (the log says why), or nil when there is none.
func invalidFiles(list []prefetch.Status) error {
	var names []string
	for _, s := range list {
		if s.State == prefetch.StateInvalid {
			names = append(names, s.File)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("prefetch sync: %s cannot be parsed, its pins are kept (the log says why): %w", strings.Join(names, ", "), errdefs.ErrInvalidArgument)
}

// isReference reports whether arg names a registry reference rather than
// an artifact ID or a prefix of one.
func isReference(arg string) bool { return strings.ContainsAny(arg, "/:@") }

func pinHolders(pins []store.Pin) string {
	var s []string
	for _, p := range pins {
		if p.Reason != "" {
			s = append(s, fmt.Sprintf("%s (%q)", p.By, p.Reason))
		} else {
			s = append(s, p.By)
		}
	}
	return strings.Join(s, ", ")
}

// printUse is ls --use: what eviction sees, least recently used first.
// Without an answer from weightsnapd an artifact the store sees no lease
// of is leased "unknown".
func printUse(a *app, list []*store.ArtifactInfo, answered bool) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tREPOSITORY\tSIZE\tFREES\tLAST USE\tLEASED\tPINNED")
	for _, info := range list {
		u := info.Use
		if u == nil {
			u = &store.Use{}
		}
		repo, pinned, leased := "-", "-", "no"
		if !answered {
			leased = "unknown"
		}
		if info.Identity != nil && info.Identity.Model.Repository != "" {
			repo = cut(info.Identity.Model.Repository, 24)
		}
		if u.Pinned() {
			pinned = pinHolders(u.Pins)
		}
		if u.Leased {
			leased = "yes"
		}
		if u.Building {
			leased = "building"
		}
		last := "-"
		if !u.LastUse.IsZero() {
			last = u.LastUse.UTC().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", info.ID.Short(), info.State, repo,
			bytefmt.IEC(u.Bytes), bytefmt.IEC(u.Frees), last, leased, pinned)
	}
	return tw.Flush()
}

// printEvictions is gc --evict's report.
func printEvictions(a *app, r *evict.Report) {
	verb := "evicted"
	if r.DryRun {
		verb = "would evict"
	}
	for _, e := range r.Evicted {
		fmt.Fprintf(a.out, "%s %s (%s, last use %s)\n", verb, e.ID.Hex(), bytefmt.IEC(e.Bytes), e.LastUse.UTC().Format(time.DateTime))
	}
	fmt.Fprintf(a.out, "evictions: %d (%s freed of %s needed)\n", len(r.Evicted), bytefmt.IEC(r.Freed), bytefmt.IEC(max(r.Need, 0)))
	if r.Freed < r.Need {
		for _, h := range r.Held {
			fmt.Fprintf(a.out, "held: %s (%s, %s)\n", h.ID.Hex(), bytefmt.IEC(h.Bytes), h.Why)
		}
	}
}

func newPrefetchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "prefetch", Short: "The artifacts weightsnapd's prefetch directory declares ([prefetch] dir)"}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "Each declared artifact's state in weightsnapd: pending, ready (pinned if declared so) or failed (with the error and the next try); a file that fails to parse is invalid, with its error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.control()
			if err != nil {
				return err
			}
			var list []prefetch.Status
			if err := c.Prefetch(cmd.Context(), &list); err != nil {
				return err
			}
			if a.jsonOut {
				if list == nil {
					list = []prefetch.Status{}
				}
				return a.printJSON(list)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FILE\tREF\tIDENTITY\tPIN\tSTATE\tTRIES\tDETAIL")
			for _, s := range list {
				id, detail := "-", ""
				if !s.ID.IsZero() {
					id = s.ID.Short()
				} else if s.Identity != "" {
					id = cut(s.Identity, 19)
				}
				pin := fmt.Sprint(s.Pin)
				switch s.State {
				case prefetch.StateFailed:
					detail = fmt.Sprintf("next try %s: %s", s.NextTry.UTC().Format(time.DateTime), s.Error)
				case prefetch.StateInvalid:
					pin, detail = "-", s.Error+" (the file declares nothing; its pins are kept)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.File, cmp.Or(s.Ref, "-"), id, pin, s.State, s.Tries, detail)
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	var timeout time.Duration
	sync := &cobra.Command{
		Use:   "sync DIR",
		Short: "Resolve the artifacts DIR's prefetch files declare into the store once, as weightsnapd does (store, peers, registry), pinning them as declared; exit 2 if a file cannot be parsed, 5 if some are not ready within --timeout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cfg := a.cfg
			cfg.Root = a.effectiveRoot()
			rt, err := noderuntime.NewRuntime(ctx, cfg, noderuntime.RuntimeOptions{Mode: resolve.Required, Remote: cfg.Resolve.RegistryOptions("weightsnap")})
			if err != nil {
				return err
			}
			d, err := rt.Domain(ctx)
			if err != nil {
				return err
			}
			m := prefetch.New(prefetch.Config{Dir: args[0], Store: d, Resolve: noderuntime.PrefetchResolver(cfg, rt, cfg.Resolve.RegistryOptions("weightsnap")),
				Every: 500 * time.Millisecond, RetryMax: time.Duration(a.cfg.Prefetch.RetryMaxSeconds) * time.Second})
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			werr := m.Wait(wctx)
			list := m.List()
			werr = errors.Join(werr, invalidFiles(list))
			if a.jsonOut {
				if list == nil {
					list = []prefetch.Status{}
				}
				return errors.Join(a.printJSON(list), werr)
			}
			for _, s := range list {
				fmt.Fprintf(a.out, "%s\t%s\t%s\t%s\n", s.File, cmp.Or(s.Ref, s.Identity), s.State, s.ID.Hex())
			}
			return werr
		},
	}
	sync.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to retry the entries that do not resolve")
	sync.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON: each declared artifact's state, as prefetch ls --json")
	cmd.AddCommand(ls, sync)
	return cmd
}
