package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weightsnap/weightsnap/internal/bytefmt"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/jsonobj"
	"github.com/weightsnap/weightsnap/internal/procs"
	"github.com/weightsnap/weightsnap/store"
)

func newStoreCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "store", Short: "Manage the store domain"}
	var set store.Policy
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the store domain (or update its policy) and print it",
		Long: "Create the store domain, or update its policy, and print it. Each flag records its field in the store's\n" +
			"domain-policy.json over [store] of the configuration file, which every start of weightsnap and weightsnapd applies.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// It prints the domain it made or found, policy included: no word
			// on its creation (a.domain's) before the policy is set.
			d, err := a.openDomain(cmd.Context(), store.Open)
			if err != nil {
				return err
			}
			keys := policyFlagKeys(cmd.Flags())
			p, changes, err := d.Policy().Overlay(set, keys)
			if err == nil {
				err = evict.CheckPolicy(p)
			}
			if err == nil && len(changes) > 0 {
				err = d.SetPolicy(p)
			}
			if err != nil {
				return err
			}
			// The file beats the store's record at the next start: say so
			// where it undoes a flag.
			if _, undo, err := a.cfg.StorePolicy(p); err == nil {
				for _, ch := range undo {
					fmt.Fprintf(a.errOut, "weightsnap: %s sets [store] %s: the next start of weightsnap or weightsnapd records it again (%s)\n", a.cfg.Path, ch.Field, ch)
				}
			}
			rep, err := d.InspectDomain(cmd.Context())
			if err != nil {
				return err
			}
			return printDomain(a, rep)
		},
	}
	def := store.DefaultPolicy()
	f := initCmd.Flags()
	f.BoolVar(&a.jsonOut, "json", false, "print JSON")
	f.StringVar((*string)(&set.Validation), "validation", string(def.Validation), "lookup validation: manifest_and_metadata or full_checksum")
	f.Var(&set.MaxArtifactBytes, "max-artifact-bytes", "largest artifact accepted, e.g. 20GiB (0: no limit)")
	f.Var(&set.MaxStoreBytes, "max-store-bytes", "largest store, e.g. 500GiB (0: no limit)")
	f.Var(&set.MinFreeBytes, "min-free-bytes", "free bytes a build must leave on the filesystem, e.g. 10GiB")
	f.IntVar(&set.CoordinationTimeoutSeconds, "coordination-timeout", def.CoordinationTimeoutSeconds, "seconds to wait for another process's lock")
	f.IntVar(&set.QuarantineMaxAgeSeconds, "quarantine-max-age", def.QuarantineMaxAgeSeconds, "seconds gc keeps quarantined entries")
	f.IntVar(&set.StaleBuildSeconds, "stale-build-seconds", def.StaleBuildSeconds, "seconds gc and other builds keep an interrupted build for the next one to continue")
	f.StringVar(&set.Eviction, "eviction", def.Eviction, "lru: a build that would cross the limits evicts the least recently used unleased, unpinned artifacts; off: it is refused")
	f.IntVar(&set.HighWatermarkPercent, "high-watermark-percent", def.HighWatermarkPercent, "weightsnapd evicts when the store's filesystem is fuller than this (percent; 0: never)")
	f.IntVar(&set.LowWatermarkPercent, "low-watermark-percent", def.LowWatermarkPercent, "... down to this (percent)")
	cmd.AddCommand(initCmd)
	return cmd
}

// policyFlags are store init's flags, each with the key of the policy
// field it sets.
var policyFlags = []struct{ flag, key string }{
	{"validation", "validation"}, {"max-artifact-bytes", "max_artifact_bytes"}, {"max-store-bytes", "max_store_bytes"},
	{"min-free-bytes", "min_free_bytes"}, {"coordination-timeout", "coordination_timeout_seconds"},
	{"quarantine-max-age", "quarantine_max_age_seconds"}, {"stale-build-seconds", "stale_build_seconds"},
	{"eviction", "eviction"}, {"high-watermark-percent", "high_watermark_percent"}, {"low-watermark-percent", "low_watermark_percent"},
}

// policyFlagKeys are the policy keys of the flags set on the command line.
func policyFlagKeys(f *pflag.FlagSet) []string {
	var keys []string
	for _, pf := range policyFlags {
		if f.Changed(pf.flag) {
			keys = append(keys, pf.key)
		}
	}
	return keys
}

func newLsCmd(a *app) *cobra.Command {
	var use bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the artifacts in the store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := a.existingDomain(cmd.Context())
			if err != nil {
				return err
			}
			var list []*store.ArtifactInfo
			if use {
				list = a.daemonUse(cmd.Context(), d, "ls --use")
			}
			answered := list != nil
			if !answered {
				if list, err = d.List(cmd.Context()); err != nil {
					return err
				}
			}
			if a.jsonOut {
				if list == nil {
					list = []*store.ArtifactInfo{}
				}
				for _, info := range list {
					info.Files = nil
				}
				return a.printJSON(list)
			}
			if use {
				slices.SortStableFunc(list, func(x, y *store.ArtifactInfo) int { return lastUse(x).Compare(lastUse(y)) })
				return printUse(a, list, answered)
			}
			return printLs(a.out, list)
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	cmd.Flags().BoolVar(&use, "use", false, "show what eviction sees, least recently used first: size, what evicting it frees, last use, leased, pinned (weightsnapd's view where it runs)")
	return cmd
}

// daemonUse is d's artifacts as weightsnapd's eviction policy sees them,
// what its releasers let go of counted in what evicting each frees; nil,
// said once on stderr for what, where weightsnapd does not answer for d.
func (a *app) daemonUse(ctx context.Context, d *store.Domain, what string) []*store.ArtifactInfo {
	sd := a.storeDaemon(ctx, d)
	if sd.c != nil {
		var list []*store.ArtifactInfo
		if err := sd.c.Use(ctx, &list); err != nil {
			sd.alone(err)
		} else if list != nil {
			return list
		}
	}
	sd.note(a, what)
	return nil
}

func lastUse(info *store.ArtifactInfo) time.Time {
	if info.Use == nil {
		return time.Time{}
	}
	return info.Use.LastUse
}

// printLs is the table `weightsnap ls` prints (the README's `weightsnap ls`
// line names its columns).
func printLs(w io.Writer, list []*store.ArtifactInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tREPOSITORY\tREVISION\tPRODUCER\tLAYOUT\tSIZE\tCREATED")
	for _, info := range list {
		fmt.Fprintln(tw, lsRow(info))
	}
	return tw.Flush()
}

// lsRow is one artifact as `weightsnap ls` shows it: the repository whole
// (the column widens for it, so two models never look the same), long
// producers and layouts cut, so a row fits 120 columns unless its
// repository is long.
func lsRow(info *store.ArtifactInfo) string {
	repo, rev, producer, layout := "-", "-", "-", "-"
	if id := info.Identity; id != nil {
		var tp string
		if id.Layout.TPSize > 0 {
			tp = fmt.Sprintf(" tp%d/%d", id.Layout.TPRank, id.Layout.TPSize)
		}
		repo, rev, producer = cmp.Or(id.Model.Repository, "-"), artifact.ShortHex(id.Model.Revision), cut(id.Producer.Name, 11)
		layout = cut(id.Layout.Name, 16-len(tp)) + tp
	}
	created := info.Created
	if t, err := time.Parse(time.RFC3339Nano, created); err == nil {
		created = t.UTC().Format(time.DateTime)
	}
	return strings.Join([]string{info.ID.Short(), info.State, repo, rev, producer, layout, bytefmt.IEC(info.TotalBytes), created}, "\t")
}

// cut shortens s to n characters, the last of them an ellipsis.
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func newInspectCmd(a *app) *cobra.Command {
	var domainFlag bool
	var remote func(cmd *cobra.Command, ref string) (bool, error) // oci_cmds.go: registry references
	cmd := &cobra.Command{
		Use:   "inspect [ID | REF | --domain]",
		Short: "Show an artifact (by digest or unique prefix), a remote artifact or weight image, or the whole domain",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && !domainFlag {
				if done, err := remote(cmd, args[0]); done {
					return err
				}
			}
			if len(args) != 1 && !domainFlag {
				return fmt.Errorf("inspect needs an artifact ID, a registry reference or --domain: %w", errdefs.ErrInvalidArgument)
			}
			d, err := a.existingDomain(cmd.Context())
			if err != nil {
				return err
			}
			if domainFlag {
				rep, err := d.InspectDomain(cmd.Context())
				if err != nil {
					return err
				}
				return printDomain(a, rep)
			}
			id, err := d.ExpandID(args[0])
			if err != nil {
				return err
			}
			info, err := d.InspectArtifact(cmd.Context(), id)
			if err != nil {
				return err
			}
			da := a.daemonArtifact(cmd.Context(), d, info)
			v, err := verificationOf(d, id)
			if err != nil {
				return err
			}
			if a.jsonOut {
				raw, err := jsonobj.Concat(info, struct {
					Verification verification `json:"verification"`
					daemonArtifact
				}{v, da})
				if err != nil {
					return err
				}
				return a.printJSON(json.RawMessage(raw))
			}
			if err := printArtifact(a, info, da.Leases); err != nil {
				return err
			}
			printVerification(a, v)
			printDaemonArtifact(a, da)
			return nil
		},
	}
	cmd.Flags().BoolVar(&domainFlag, "domain", false, "inspect the domain: usage and lock activity")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	remote = addRemoteInspect(a, cmd)
	return cmd
}

// printArtifact shows one artifact; leases is what is known of its leases:
// held, none or unknown (weightsnapd did not answer).
func printArtifact(a *app, info *store.ArtifactInfo, leases string) error {
	fmt.Fprintf(a.out, "ID:        %s\nState:     %s\nPath:      %s\n", info.ID, info.State, info.Path)
	if info.Reason != "" {
		fmt.Fprintf(a.out, "Reason:    %s\n", info.Reason)
	}
	if id := info.Identity; id != nil {
		layout := id.Layout.Name
		if id.Layout.TPSize > 0 {
			layout += fmt.Sprintf(" (tp rank %d of %d)", id.Layout.TPRank, id.Layout.TPSize)
		}
		fmt.Fprintf(a.out, "Model:     %s@%s\nComponent: %s\nDType:     %s\nLayout:    %s\nProducer:  %s %s\n",
			id.Model.Repository, id.Model.Revision, id.Component, id.Representation.DType,
			layout, id.Producer.Name, id.Producer.Version)
	}
	fmt.Fprintf(a.out, "Created:   %s\nSize:      %s (%d bytes), %d tensors\nFiles:\n", info.Created, bytefmt.IEC(info.TotalBytes), info.TotalBytes, info.TensorCount)
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	for _, f := range info.Files {
		fmt.Fprintf(tw, "  %s\t%s\t%d tensors\tsha256:%s\n", f.Path, bytefmt.IEC(f.Size), f.Tensors, artifact.ShortHex(f.SHA256))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if u := info.Use; u != nil {
		pinned := "not pinned"
		if u.Pinned() {
			pinned = "pinned by " + pinHolders(u.Pins)
		}
		leased := "leased no"
		switch leases {
		case leasesHeld:
			leased = "leased yes"
		case leasesUnknown:
			leased = "leases unknown"
		}
		fmt.Fprintf(a.out, "Use:       last %s, %s, %s, evicting it frees %s\n", u.LastUse.UTC().Format(time.DateTime), leased, pinned, bytefmt.IEC(u.Frees))
	}
	return printLocks(a, info.Holders)
}

// printLocks is the section of the store's lock holders, when there are any.
func printLocks(a *app, holders []store.LockHolder) error {
	if len(holders) == 0 {
		return nil
	}
	fmt.Fprintln(a.out, "Lock holders:")
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	for _, h := range holders {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", procs.Describe(h.PID), h.Mode, h.Lock)
	}
	return tw.Flush()
}

// printDomain shows the domain: JSON with --json, else its usage, policy
// and lock holders as text.
func printDomain(a *app, r *store.DomainReport) error {
	if a.jsonOut {
		return a.printJSON(r)
	}
	free := bytefmt.IEC(r.FreeBytes)
	if r.HostMemory {
		free += " (tmpfs: host memory)"
	}
	limit := func(n bytefmt.Size) string {
		if n == 0 {
			return "none"
		}
		return bytefmt.IEC(int64(n))
	}
	p := r.Policy
	fmt.Fprintf(a.out, "Root:        %s (%s, %s free)\n", r.Root, r.FSType, free)
	fmt.Fprintf(a.out, "Policy:      validation %s, max artifact %s, max store %s, min free %s, coordination timeout %ds, quarantine kept %ds\n",
		p.Validation, limit(p.MaxArtifactBytes), limit(p.MaxStoreBytes), limit(p.MinFreeBytes), p.CoordinationTimeoutSeconds, p.QuarantineMaxAgeSeconds)
	fmt.Fprintf(a.out, "Eviction:    %s, high watermark %d%%, low watermark %d%%, interrupted builds kept %ds\n",
		p.Eviction, p.HighWatermarkPercent, p.LowWatermarkPercent, p.StaleBuildSeconds)
	for _, s := range r.States {
		fmt.Fprintf(a.out, "%-12s %d (%s): freed by %s\n", strings.ToUpper(s.State[:1])+s.State[1:]+":", s.Count, bytefmt.IEC(s.Bytes), s.FreedBy)
	}
	fmt.Fprintf(a.out, "%-12s %s\n", "Total:", bytefmt.IEC(r.TotalBytes))
	return printLocks(a, r.Locks)
}

// printDaemonArtifact says what of weightsnapd holds an artifact, or that
// it did not answer and what that leaves unknown.
func printDaemonArtifact(a *app, da daemonArtifact) {
	if da.Status != daemonAnswered {
		fmt.Fprintf(a.out, "weightsnapd: %s (%s): its leases are unknown, and what evicting it frees is the store's alone\n", da.Status, da.why)
		return
	}
	h := da.Holders
	if h == nil || (!h.Leased && len(h.Pending) == 0) {
		return
	}
	fmt.Fprintf(a.out, "weightsnapd: lease held %v\n", h.Leased)
	for _, s := range h.Snapshots {
		fmt.Fprintf(a.out, "  snapshot  %s\n", s)
	}
	for _, m := range h.Mounts {
		fmt.Fprintf(a.out, "  mount     %s\n", m)
	}
	for _, p := range h.Pending {
		fmt.Fprintf(a.out, "  pending   %s (waits for a repair)\n", p)
	}
}

func newRmCmd(a *app) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Remove artifacts; a leased or building one is reported and left alone",
		Long: `Remove artifacts; a leased or building one is reported and left alone (exit 5).

An artifact that weightsnapd's snapshots alone lease is waited for, up to
--wait: containerd removes a container's snapshot, and weightsnapd lets
the lease go, a moment after the container is gone (nerdctl run --rm
returns before).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.existingDomain(cmd.Context())
			if err != nil {
				return err
			}
			var errs []error
			removed := []artifactRef{}
			for _, ref := range args {
				id, err := d.ExpandID(ref)
				if err == nil {
					err = a.explainBusy(cmd.Context(), id, a.removeWaiting(cmd.Context(), d, id, wait))
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ref, err))
					continue
				}
				removed = append(removed, refOf(id))
				if !a.jsonOut {
					fmt.Fprintln(a.out, id.Hex())
				}
			}
			if a.jsonOut {
				if err := a.printJSON(removed); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON: the list of the artifacts removed")
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Second, "how long to wait for an artifact only weightsnapd's snapshots lease (0: refuse at once)")
	return cmd
}

func newGCCmd(a *app) *cobra.Command {
	var o store.GCOptions
	var evicting, dryRun bool
	var to string
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove stale temp builds, finish interrupted removals, drop old quarantined entries; --evict: evict least recently used artifacts",
		Long: `Remove stale temp builds, finish interrupted removals, drop old quarantined entries.
An interrupted pull or fetch is kept for the next one of its artifact to continue, until it is older
than [store] stale_build_seconds (a day), or with --all.

With --evict it also evicts unleased, unpinned READY artifacts, least recently
used first: until the store is within max_store_bytes and min_free_bytes and its
filesystem under the high watermark (down to the low one), or, with --to, until
the store holds at most BYTES (each inode once). --dry-run says what would go.
Where weightsnapd serves the store it evicts (its releasers first empty the
weight snapshots that link an artifact, so that evicting it frees its whole
size); elsewhere the store alone does, as stderr says. A target that cannot be
met exits 5, naming what holds the rest.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := a.domain(cmd.Context())
			if err != nil {
				return err
			}
			var rep *evict.Report
			var sd storeDaemon
			if evicting {
				req := control.EvictRequest{DryRun: dryRun}
				if cmd.Flags().Changed("to") {
					n, err := bytefmt.Parse(to)
					if err != nil {
						return err
					}
					req.To = &n
				}
				if rep, sd, err = a.evict(cmd.Context(), d, req); err != nil {
					return err
				}
				if !a.jsonOut {
					printEvictions(a, rep)
				}
			}
			short := shortOf(rep)
			if evicting && dryRun {
				if a.jsonOut {
					return errors.Join(a.printEvictJSON(rep, sd, nil), short)
				}
				return short
			}
			r, err := d.GC(cmd.Context(), o)
			if err != nil {
				return err
			}
			if r.Removed == nil {
				r.Removed = []store.TempBuild{}
			}
			if r.Kept == nil {
				r.Kept = []store.TempBuild{}
			}
			if a.jsonOut {
				if evicting {
					return errors.Join(a.printEvictJSON(rep, sd, r), short)
				}
				return a.printJSON(r)
			}
			fmt.Fprintf(a.out, "temp builds: %d (%s)\ntombstones: %d (%s)\ncleared to quarantine: %d (%s)\nquarantined: %d (%s)\ndeny markers: %d\nsignature records: %d\n",
				r.Temps.Count, bytefmt.IEC(r.Temps.Bytes), r.Tombstones.Count, bytefmt.IEC(r.Tombstones.Bytes),
				r.Cleared.Count, bytefmt.IEC(r.Cleared.Bytes), r.Quarantined.Count, bytefmt.IEC(r.Quarantined.Bytes), r.DenyMarkers, r.Signatures)
			for _, t := range r.Removed {
				fmt.Fprintf(a.out, "removed tmp/%s (%s): %s\n", t.Name, bytefmt.IEC(t.Bytes), t.Reason)
			}
			for _, t := range r.Kept {
				fmt.Fprintf(a.out, "kept tmp/%s (%s of %s): %s\n", t.Name, bytefmt.IEC(t.Bytes), t.ID.Short(), t.Reason)
			}
			return short
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	cmd.Flags().BoolVar(&o.All, "all", false, "remove interrupted builds however young, losing what a rerun would continue from")
	cmd.Flags().BoolVar(&evicting, "evict", false, "also evict least recently used artifacts (see above)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "with --evict: say what would be evicted, evict nothing")
	cmd.Flags().StringVar(&to, "to", "", "with --evict: evict until the store holds at most this (e.g. 600MiB)")
	return cmd
}

// evict has weightsnapd evict as req says where it serves d, else d's own
// eviction policy (said once on stderr).
func (a *app) evict(ctx context.Context, d *store.Domain, req control.EvictRequest) (*evict.Report, storeDaemon, error) {
	sd := a.storeDaemon(ctx, d)
	if sd.c != nil {
		rep := &evict.Report{}
		return rep, sd, sd.c.Evict(ctx, req, rep)
	}
	sd.note(a, "gc --evict")
	ev, err := evict.New(d)
	if err != nil {
		return nil, sd, err
	}
	if req.To != nil {
		rep, err := ev.To(ctx, *req.To, req.DryRun)
		return rep, sd, err
	}
	rep, err := ev.ToLimits(ctx, req.DryRun)
	return rep, sd, err
}

// shortOf is the failure of an eviction that fell short of its target,
// naming what holds the rest; nil when it met it, or for no eviction.
func shortOf(rep *evict.Report) error {
	if rep == nil || rep.Freed >= rep.Need {
		return nil
	}
	err := &store.CapacityError{Limit: "eviction", Need: rep.Need, Have: rep.Freed, Reclaimable: rep.Freed, Held: rep.Held, Checked: true}
	if len(rep.Held) == 0 {
		return fmt.Errorf("%w; the rest is not in READY artifacts (weightsnap inspect --domain shows where)", err)
	}
	return err
}

// printEvictJSON prints gc --evict's report as one object: the eviction,
// who answered for it ("daemon"), and gc's own report when it ran.
func (a *app) printEvictJSON(rep *evict.Report, sd storeDaemon, gc *store.GCReport) error {
	raw, err := jsonobj.Concat(rep, struct {
		Daemon string          `json:"daemon"`
		GC     *store.GCReport `json:"gc,omitempty"`
	}{sd.status, gc})
	if err != nil {
		return err
	}
	return a.printJSON(json.RawMessage(raw))
}
