package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/bytefmt"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/staging"
	"github.com/weightsnap/weightsnap/staging/hubsynth"
	"github.com/weightsnap/weightsnap/trust"
)

// stagingFlags are the flags every staging command takes.
type stagingFlags struct {
	node, stateDir string
}

func (f *stagingFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.node, "node", "", "this node's name in ledgers (default: [staging] node, else the host name)")
	fs.StringVar(&f.stateDir, "state-dir", "", "staging state: ledgers, journals, locks (default: [staging] dir, else <root>/staging)")
}

// stagingEngine opens the staging state. Unless create is set, a state
// directory that does not exist yet gives a nil engine (nothing is staged).
func (a *app) stagingEngine(f stagingFlags, mode staging.Mode, create bool) (*staging.Engine, error) {
	dir := f.stateDir
	if dir == "" {
		dir = a.cfg.StagingDir(a.effectiveRoot())
	}
	if !create {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	node := f.node
	if node == "" {
		node = a.cfg.Staging.Node
	}
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("staging: no node name: %w", err)
		}
		node = h
	}
	st, err := staging.OpenState(dir, node)
	if err != nil {
		return nil, err
	}
	return staging.New(st, staging.Options{Mode: mode, Workers: a.cfg.Staging.Workers,
		SourceTimeout: time.Duration(a.cfg.Staging.SourceTimeoutSeconds) * time.Second,
		Progress: func(lane string, total int64) staging.Progress {
			return laneProgress{newProgress("stage "+lane, total)}
		}}), nil
}

// laneProgress is the progress of one staged lane, as the staging engine
// feeds it: a lane copies every byte it planned unless it stopped.
type laneProgress struct{ *progress }

// errLaneStopped ends the progress of a lane that copied less than it planned.
var errLaneStopped = errors.New("lane stopped")

// Done ends the lane's progress.
func (l laneProgress) Done() {
	var err error
	if l.done < l.total {
		err = errLaneStopped
	}
	l.End(err)
}

// lessGC lets the heap of a stage run grow to five times what is live
// before a collection, unless GOGC says otherwise: the process lives for one
// run, whose live heap is its ledgers and a few copy buffers, and a no-op
// re-run of a 1,000-file lane spent a sixth of its CPU collecting.
func lessGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// stageResult is the JSON of weightsnap stage.
type stageResult struct {
	*staging.Report
	Published []published `json:"published,omitempty"`
}

type published struct {
	staging.Snapshot
	ID    artifact.ID `json:"digest"`
	Built bool        `json:"built"`
	// Verified says how the snapshot's model.sig met the trust policy
	// (absent without one).
	Verified []trust.Verified `json:"verified,omitempty"`
}

func newStageCmd(a *app) *cobra.Command {
	var sf stagingFlags
	var mode string
	var dryRun, publish bool
	cmd := &cobra.Command{
		Use:   "stage RECIPE [--stage auto|skip|force] [--dry-run] [--publish] [--json]",
		Short: "Stage the lanes of a recipe on this node: mirror hub caches, copy rank rows, verify, dedup, evict",
		Long: `Stage every [[staging]] lane of RECIPE (TOML) on this node.

--stage auto (default) skips what the ledger and a content check say is complete;
force re-verifies everything; skip trusts the ledger and reads no source of a
staged lane. A preflight checks sources, min_free, max_used (evicting least
recently used idle lanes) and keep_in_memory before any byte is written.
--dry-run prints that plan and touches no data. --publish also imports every
staged hub snapshot into the store (as weightsnap import would).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lessGC()
			m, err := staging.ParseMode(mode)
			if err != nil {
				return err
			}
			r, err := staging.LoadRecipe(args[0])
			if err != nil {
				return err
			}
			e, err := a.stagingEngine(sf, m, true)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if dryRun {
				plan, err := e.Plan(ctx, r)
				if err != nil {
					return err
				}
				if a.jsonOut {
					err = a.printJSON(plan)
				} else {
					printPlan(a.out, plan)
				}
				if err == nil && len(plan.Problems) > 0 {
					err = plan.Err()
				}
				return err
			}
			rep, stageErr := e.Stage(ctx, r)
			if rep == nil {
				return stageErr
			}
			res := stageResult{Report: rep}
			if publish && stageErr == nil {
				res.Published, stageErr = a.publishStaged(ctx, e, rep)
			}
			if a.jsonOut {
				if err := a.printJSON(res); err != nil {
					return err
				}
			} else {
				printStage(a.out, res)
			}
			return stageErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&mode, "stage", string(staging.ModeAuto), "auto, skip or force")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan; touch no data")
	f.BoolVar(&publish, "publish", false, "also import each staged hub snapshot into the store")
	f.BoolVar(&a.jsonOut, "json", false, "print JSON")
	sf.register(cmd.PersistentFlags())
	cmd.AddCommand(newStageLocateCmd(a, &sf))
	return cmd
}

// publishStaged imports every staged snapshot of the staged hub-mirror
// lanes into the store, through the import path (fingerprint cache first).
func (a *app) publishStaged(ctx context.Context, e *staging.Engine, rep *staging.Report) ([]published, error) {
	d, err := a.domain(ctx)
	if err != nil {
		return nil, err
	}
	var out []published
	for _, lr := range rep.Lanes {
		if lr.Kind != staging.KindHubMirror || lr.State != staging.StateStaged {
			continue
		}
		snaps, err := e.Snapshots(ctx, lr.ID)
		if err != nil {
			return out, err
		}
		for _, s := range snaps {
			var pr *progress
			lease, res, verified, err := importChecked(ctx, a, d, resolve.ImportRequest{Dir: s.Dir, Repository: s.Repo, Revision: s.Revision,
				OnTotal:  func(total int64) { pr = newProgress("publish "+s.Repo, total) },
				Progress: func(n int64) { pr.Add(n) }})
			if pr != nil {
				pr.End(err)
			}
			if err != nil {
				return out, fmt.Errorf("publish %s@%s from lane %s: %w", s.Repo, s.Revision, s.Lane, err)
			}
			out = append(out, published{Snapshot: s, ID: lease.ID, Built: res.Built, Verified: verified})
			lease.Close()
		}
	}
	return out, nil
}

func newStageLocateCmd(a *app, sf *stagingFlags) *cobra.Command {
	var recipe string
	cmd := &cobra.Command{
		Use:     "locate REPO[@REV]|LANE [--recipe RECIPE] [--json]",
		Aliases: []string{"resolve"}, // its first name
		Short:   "Print the local path of a repository's snapshot (or a lane) when staged and verified, else its source path",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r *staging.Recipe
			if recipe != "" {
				var err error
				if r, err = staging.LoadRecipe(recipe); err != nil {
					return err
				}
			}
			e, err := a.stagingEngine(*sf, staging.ModeAuto, true)
			if err != nil {
				return err
			}
			res, err := e.Locate(cmd.Context(), args[0], r)
			if err != nil {
				return err
			}
			return a.printResult(res, res.Path)
		},
	}
	cmd.Flags().StringVar(&recipe, "recipe", "", "recipe whose lanes answer with their source even when never staged")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return cmd
}

func newStagingCmd(a *app) *cobra.Command {
	var sf stagingFlags
	cmd := &cobra.Command{Use: "staging", Short: "Staged lanes of this node: list and evict"}
	sf.register(cmd.PersistentFlags())
	ls := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List staged lanes, least recently used first: state, files, size, space eviction frees, last use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := a.stagingEngine(sf, staging.ModeAuto, false)
			if err != nil {
				return err
			}
			var lanes []staging.LaneStatus
			if e != nil {
				if lanes, err = e.List(cmd.Context()); err != nil {
					return err
				}
			}
			if a.jsonOut {
				return a.printJSON(lanes)
			}
			printLanes(a.out, lanes)
			return nil
		},
	}
	ls.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	evict := &cobra.Command{
		Use:   "evict ID [--json]",
		Short: "Remove a lane's staged files and close its ledger (refused while a process uses them)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := a.stagingEngine(sf, staging.ModeAuto, false)
			if err != nil {
				return err
			}
			if e == nil {
				return fmt.Errorf("lane %s: nothing is staged on this node: %w", args[0], errdefs.ErrNotFound)
			}
			s, err := e.Evict(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(s)
			}
			fmt.Fprintf(a.out, "evicted lane %s from %s: freed %s\n", s.ID, s.Dst, bytefmt.IEC(s.Frees))
			return nil
		},
	}
	evict.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	cmd.AddCommand(ls, evict)
	return cmd
}

func printPlan(w io.Writer, p *staging.Plan) {
	fmt.Fprintf(w, "plan for node %s (--stage %s); nothing was written\n", p.Node, p.Mode)
	for _, l := range p.Lanes {
		fmt.Fprintf(w, "\nlane %s (%s, verify %s): %s -> %s\n", l.ID, l.Kind, l.Verify, l.Src, l.Dst)
		if l.Trusted {
			fmt.Fprintf(w, "  staged per the ledger (trusted): %d files, %s; no source is read\n", l.Files, bytefmt.IEC(l.Bytes))
			continue
		}
		fmt.Fprintf(w, "  %d files, %s, and %d links: present %d (%s), check %d, copy %d; writes at most %s\n",
			l.Files, bytefmt.IEC(l.Bytes), l.Links, l.PresentFiles, bytefmt.IEC(l.PresentBytes), l.CheckFiles, l.CopyFiles, bytefmt.IEC(l.CopyBytes))
		for _, it := range l.Items {
			switch {
			case it.Kind == staging.EntryLink:
				fmt.Fprintf(w, "  %-7s %-6s %s -> %s\n", it.Action, it.Kind, it.Path, it.Target)
			default:
				fmt.Fprintf(w, "  %-7s %-6s %s (%s)\n", it.Action, it.Kind, it.Path, bytefmt.IEC(it.Bytes))
			}
		}
		for _, n := range l.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	for _, fs := range p.Filesystems {
		fmt.Fprintf(w, "\ndestination filesystem of %s (%s): %s used of %s, %s free, max_used %s; staging writes at most %s\n",
			strings.Join(fs.Lanes, ", "), fs.Path, bytefmt.IEC(fs.Used), bytefmt.IEC(fs.Total), bytefmt.IEC(fs.Free), bytefmt.IEC(fs.Limit), bytefmt.IEC(fs.Need))
	}
	for _, ev := range p.Evict {
		fmt.Fprintf(w, "evict lane %s (%s, last used %s): frees %s\n", ev.ID, ev.Dst, when(ev.LastUsed), bytefmt.IEC(ev.Frees))
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(w, "problem: lane %s: %s: %s\n", pr.Lane, pr.Check, pr.Detail)
	}
}

func printStage(w io.Writer, res stageResult) {
	for _, ev := range res.Evicted {
		fmt.Fprintf(w, "evicted lane %s (%s) to stay under max_used: freed %s\n", ev.ID, ev.Dst, bytefmt.IEC(ev.Frees))
	}
	for _, l := range res.Lanes {
		if l.Trusted {
			fmt.Fprintf(w, "lane %s: %s per the ledger (--stage skip): %d files, %s\n", l.ID, l.State, l.Files, bytefmt.IEC(l.Bytes))
		} else {
			fmt.Fprintf(w, "lane %s: %s: %d files, %s; copied %d (%s, %s/s), linked %d, adopted %d, unchanged %d, links written %d, removed %d; %.2f s\n",
				l.ID, l.State, l.Files, bytefmt.IEC(l.Bytes), l.Copied, bytefmt.IEC(l.CopiedBytes), bytefmt.IEC(int64(float64(l.CopiedBytes)/max(l.Seconds, 1e-3))),
				l.Linked, l.Adopted, l.Unchanged, l.Links, l.Removed, l.Seconds)
		}
		for _, n := range l.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, e := range l.Env {
			fmt.Fprintf(w, "  env %s\n", e)
		}
		if len(l.Mounts) > 0 {
			fmt.Fprintf(w, "  nerdctl run %s ...   (or %s)\n", strings.Join(l.Mounts[:2], " "), strings.Join(l.Mounts[2:], " "))
		}
	}
	for _, p := range res.Published {
		verb := "found"
		if p.Built {
			verb = "imported"
		}
		fmt.Fprintf(w, "published %s@%s (lane %s): %s %s\n", p.Repo, p.Revision, p.Lane, verb, p.ID)
	}
}

func printLanes(w io.Writer, lanes []staging.LaneStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSTATE\tFILES\tSIZE\tFREES\tLAST USE\tDST\tIN USE")
	for _, l := range lanes {
		inUse := "-"
		if l.InUse != "" {
			inUse = l.InUse
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", l.ID, l.Kind, l.State, l.Files, bytefmt.IEC(l.Bytes), bytefmt.IEC(l.Frees), when(l.LastUsed), l.Dst, inUse)
	}
	tw.Flush()
}

func when(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Local().Format(time.DateTime)
}

func newDevHubCmd(a *app) *cobra.Command {
	var out, repo, commit string
	cmd := &cobra.Command{
		Use:   "hub DIR --out CACHE --repo ORG/NAME [--commit SHA1]",
		Short: "Add a checkpoint directory to a Hugging Face hub cache as a snapshot (blobs, relative links, refs/main)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(commit) != 40 {
				return fmt.Errorf("--commit %q: want 40 hex digits: %w", commit, errdefs.ErrInvalidArgument)
			}
			if err := hubsynth.AddDir(out, repo, commit, args[0]); err != nil {
				return err
			}
			fmt.Fprintln(a.out, filepath.Join(out, hubsynth.Folder(repo), "snapshots", commit))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "hub cache folder (required)")
	f.StringVar(&repo, "repo", "", "repository, org/name (required)")
	f.StringVar(&commit, "commit", "0123456789abcdef0123456789abcdef01234567", "snapshot commit")
	cmd.MarkFlagRequired("out")
	cmd.MarkFlagRequired("repo")
	return cmd
}
