package staging

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"
)

// Plan is what staging a recipe would do: per lane what is staged, from
// where, to where, how many bytes and what is already there; per
// destination filesystem the space it needs and the lanes it would evict;
// and the preflight problems that stop it.
type Plan struct {
	Node        string      `json:"node"`
	Mode        Mode        `json:"mode"`
	Lanes       []LanePlan  `json:"lanes"`
	Filesystems []FSPlan    `json:"filesystems,omitempty"`
	Evict       []EvictPlan `json:"evict,omitempty"`
	Problems    []Problem   `json:"problems,omitempty"`
}

// LanePlan is one lane of a plan.
type LanePlan struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	Verify  Verify `json:"verify"`
	Trusted bool   `json:"trusted,omitempty"` // --stage skip and a staged ledger: nothing is read
	Files   int    `json:"files"`
	Links   int    `json:"links"`
	Bytes   int64  `json:"bytes"`
	// Present: the ledger and the staged file's stat say it is there (auto
	// still checks its source's content); Verify: a file of the right size
	// is there that no ledger vouches for; Copy: nothing usable is there.
	PresentFiles int        `json:"present_files"`
	PresentBytes int64      `json:"present_bytes"`
	CheckFiles   int        `json:"check_files"`
	CopyFiles    int        `json:"copy_files"`
	CopyBytes    int64      `json:"copy_bytes"` // at most this many bytes are written (check + copy)
	Notes        []string   `json:"notes,omitempty"`
	Items        []PlanItem `json:"items,omitempty"`
}

// PlanItem is one file or link of a lane: Path is relative to the lane's
// src and dst.
type PlanItem struct {
	Path   string `json:"path"`
	Kind   string `json:"kind"`
	Size   int64  `json:"size,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"` // bytes written when copied (sparse: header and rows)
	Action string `json:"action"`          // present, check, copy, link
	Target string `json:"target,omitempty"`
}

// Item actions.
const (
	ActionPresent = "present"
	ActionCheck   = "check"
	ActionCopy    = "copy"
	ActionLink    = "link"
)

// lanePlan is a lane being planned and staged.
type lanePlan struct {
	b       *Block
	ledger  *Ledger
	items   []item
	srcRoot string // sparse-rows: the folder item paths are relative to
	trusted bool
	notes   []string
	dev     uint64 // the destination's filesystem
	fsDir   string // the destination, or its nearest existing parent
	public  LanePlan
}

// Mode says how much staging trusts its ledger.
type Mode string

// Modes.
const (
	ModeAuto  Mode = "auto"  // skip what the ledger and a content check say is complete
	ModeSkip  Mode = "skip"  // trust the ledger: a staged lane is not read at all
	ModeForce Mode = "force" // re-verify everything
)

// ParseMode parses a --stage value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeSkip, ModeForce:
		return m, nil
	}
	return "", fmt.Errorf("--stage %q: want auto, skip or force: %w", s, errdefs.ErrInvalidArgument)
}

// planLane checks a lane's source is reachable, walks it, takes its ledger
// as loaded and says per item what is already there. It writes nothing, and
// changes nothing of the loaded ledger (the plan's other lanes see it as
// loaded). ledger waits for the ledgers, which load while the source is
// walked; in mode skip, where a staged lane's source is not read, it is
// taken first.
func (e *Engine) planLane(ctx context.Context, b *Block, ledger func() loaded) (*lanePlan, *Problem, error) {
	lp := &lanePlan{b: b}
	var w *walked
	if e.opts.Mode != ModeSkip {
		var problem *Problem
		var err error
		if w, problem, err = e.walkLane(ctx, b); w == nil {
			return nil, problem, err
		}
	}
	ld := ledger()
	l, err := ld.l, ld.err
	var le *LedgerError
	switch {
	case errors.As(err, &le):
		log.G(ctx).WithError(err).Warn("staging: ledger unreadable, checking the destination instead")
		lp.notes = append(lp.notes, "ledger unreadable ("+err.Error()+"): staged files are verified again")
	case errdefs.IsNotFound(err):
		l = nil
	case err != nil:
		return nil, nil, err
	}
	if l == nil {
		l = &Ledger{Schema: LedgerSchema, ID: b.ID, Node: e.st.Node, State: StateStaging}
	}
	if l.Src != b.Src || l.Dst != b.Dst || l.Kind != b.Kind {
		c := *l
		l = &c
		l.Entries, l.Bytes = nil, 0 // staged from elsewhere, or to elsewhere: nothing carries over
		if l.State == StateStaged {
			l.State = StateStaging
		}
	}
	lp.ledger = l
	lp.dev, lp.fsDir, err = existingParent(b.Dst)
	if err != nil {
		return nil, nil, fmt.Errorf("lane %s: destination %s: %w", b.ID, b.Dst, err)
	}
	pub := LanePlan{ID: b.ID, Kind: b.Kind, Src: b.Src, Dst: b.Dst, Verify: b.Verify}
	if e.opts.Mode == ModeSkip && l.State == StateStaged {
		lp.trusted, pub.Trusted = true, true
		pub.Files, pub.Bytes, pub.PresentFiles, pub.PresentBytes = l.files(), l.Bytes, l.files(), l.Bytes
		lp.public = pub
		return lp, nil, nil
	}
	if w == nil {
		var problem *Problem
		if w, problem, err = e.walkLane(ctx, b); w == nil {
			return nil, problem, err
		}
	}
	lp.items, lp.srcRoot = w.items, w.srcRoot
	lp.notes = append(lp.notes, w.notes...)
	pub.Items = lp.classifyAll(e.opts.Workers)
	for i, it := range lp.items {
		pi := &pub.Items[i]
		if it.kind == EntryLink {
			pub.Links++
			continue
		}
		pub.Files++
		pub.Bytes += it.size
		switch pi.Action {
		case ActionPresent:
			pub.PresentFiles++
			pub.PresentBytes += it.size
		case ActionCheck:
			pub.CheckFiles++
			pub.CopyBytes += pi.Bytes
		case ActionCopy:
			pub.CopyFiles++
			pub.CopyBytes += pi.Bytes
		}
	}
	pub.Notes = lp.notes
	lp.public = pub
	return lp, nil, nil
}

// walked is what walking a lane's source found.
type walked struct {
	items   []item
	notes   []string
	srcRoot string
}

// walkLane checks a lane's source answers and lists what it stages. A
// source that does not answer is a problem (w nil, err nil).
func (e *Engine) walkLane(ctx context.Context, b *Block) (w *walked, problem *Problem, err error) {
	if err := reachable(ctx, b.Src, e.opts.SourceTimeout); err != nil {
		return nil, &Problem{Lane: b.ID, Check: "source", Detail: err.Error(), class: errdefs.ErrUnavailable}, nil
	}
	w = &walked{}
	switch b.Kind {
	case KindHubMirror:
		w.items, w.notes, err = hubWalk(ctx, b, e.opts.Workers)
	case KindSparseRows:
		w.srcRoot, w.items, err = sparseWalk(ctx, b)
	}
	if err != nil {
		return nil, nil, err
	}
	return w, nil, nil
}

// classifyAll classifies every item, in order, and marks the present ones,
// with up to workers stat'ing destinations at once.
func (lp *lanePlan) classifyAll(workers int) []PlanItem {
	if len(lp.items) == 0 {
		return nil
	}
	out := make([]PlanItem, len(lp.items))
	parallelFor(len(lp.items), workers, func(i int) {
		pi := lp.classify(lp.items[i])
		lp.items[i].present = pi.Action == ActionPresent
		out[i] = pi
	})
	return out
}

// classify says what is already at an item's destination, from the ledger
// and a stat, reading no content.
func (lp *lanePlan) classify(it item) PlanItem {
	dst := filepath.Join(lp.b.Dst, filepath.FromSlash(it.path))
	pi := PlanItem{Path: it.path, Kind: it.kind, Size: it.size, Bytes: it.size, Target: it.target}
	if it.kind == EntryLink {
		pi.Action = ActionLink
		if cur, err := os.Readlink(dst); err == nil && cur == it.target {
			pi.Action = ActionPresent
		}
		return pi
	}
	if it.kind == EntrySparse {
		pi.Bytes = it.header
		for _, r := range it.ranges {
			pi.Bytes += r.n
		}
	}
	if prev, ok := lp.ledger.Entry(it.path); ok && prev.Kind == it.kind && prev.Size == it.size && dstMatches(dst, prev) {
		pi.Action = ActionPresent
		return pi
	}
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() == it.size && it.kind != EntrySparse {
		pi.Action = ActionCheck
		return pi
	}
	pi.Action = ActionCopy
	return pi
}

// existingParent returns the filesystem device of dir, or of its nearest
// existing parent, and that folder.
func existingParent(dir string) (uint64, string, error) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		err := unix.Stat(d, &st)
		if err == nil {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return 0, "", fmt.Errorf("%s is not a folder: %w", d, errdefs.ErrInvalidArgument)
			}
			return st.Dev, d, nil
		}
		if !errors.Is(err, unix.ENOENT) || d == filepath.Dir(d) {
			return 0, "", err
		}
	}
}

// reachable stats a source within timeout: a hung network filesystem is
// reported, not waited on forever.
func reachable(ctx context.Context, src string, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(src)
		done <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("source unreachable: %w", err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("source %s did not answer a stat within %s", src, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}
