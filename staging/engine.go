package staging

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/internal/procs"
)

// Progress is told of the bytes a lane copies.
type Progress interface {
	Add(n int64)
	Done()
}

// Options configure an Engine.
type Options struct {
	Mode Mode
	// Workers is how many files are staged at once (default 4); each copy
	// also keeps up to copyReaders reads in flight.
	Workers int
	// SourceTimeout bounds the reachability check of a source (default 30 s).
	SourceTimeout time.Duration
	// JournalEvery is how often verified files are made durable and
	// journaled during a run (default 2 s; also every 1,024 files): what a
	// crash can cost is re-verifying that much.
	JournalEvery time.Duration
	// Progress, if set, returns the progress of a lane about to copy total bytes.
	Progress func(lane string, total int64) Progress
}

// Engine stages recipes on one node.
type Engine struct {
	st   *State
	opts Options
}

// New returns an engine keeping its state in st.
func New(st *State, opts Options) *Engine {
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.SourceTimeout <= 0 {
		opts.SourceTimeout = 30 * time.Second
	}
	if opts.JournalEvery <= 0 {
		opts.JournalEvery = 2 * time.Second
	}
	return &Engine{st: st, opts: opts}
}

type noProgress struct{}

func (noProgress) Add(int64) {}
func (noProgress) Done()     {}

func (e *Engine) progress(lane string, total int64) Progress {
	if e.opts.Progress == nil || total == 0 {
		return noProgress{}
	}
	return e.opts.Progress(lane, total)
}

// ledgers loads the ledger of every lane on this node; unreadable ones are
// logged and left out.
func (e *Engine) ledgers(ctx context.Context) ([]*Ledger, error) {
	ids, err := e.st.IDs()
	if err != nil {
		return nil, err
	}
	var out []*Ledger
	for _, id := range ids {
		l, err := e.st.Load(id)
		if err != nil {
			log.G(ctx).WithError(err).WithField("lane", id).Warn("staging: ledger unreadable")
			if l == nil {
				continue
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// loaded is what State.Load returned for one lane.
type loaded struct {
	l   *Ledger
	err error
}

// allLedgers loads every lane's ledger (Engine.ledgers) when first called,
// and then returns the same: the other lanes' ledgers are read only when a
// plan may evict or a copy may hardlink, never by a run that changes
// nothing.
func (e *Engine) allLedgers(ctx context.Context) func() ([]*Ledger, error) {
	var once sync.Once
	var ls []*Ledger
	var err error
	return func() ([]*Ledger, error) {
		once.Do(func() { ls, err = e.ledgers(ctx) })
		return ls, err
	}
}

// Plan says what staging r would do, touching no data: a dry run.
func (e *Engine) Plan(ctx context.Context, r *Recipe) (*Plan, error) {
	plan, _, err := e.plan(ctx, r, e.allLedgers(ctx))
	return plan, err
}

// plan plans r. The ledgers of r's lanes load while their sources are
// walked; all gives every lane's, for the preflight's evictions.
func (e *Engine) plan(ctx context.Context, r *Recipe, all func() ([]*Ledger, error)) (*Plan, []*lanePlan, error) {
	loadc := make(chan map[string]loaded, 1)
	go func() {
		own := make(map[string]loaded, len(r.Blocks))
		for _, b := range r.Blocks {
			l, err := e.st.Load(b.ID)
			own[b.ID] = loaded{l, err}
		}
		loadc <- own
	}()
	var own map[string]loaded
	ledger := func(id string) loaded {
		if own == nil {
			own = <-loadc
		}
		return own[id]
	}
	plan := &Plan{Node: e.st.Node, Mode: e.opts.Mode}
	var lanes []*lanePlan
	for i := range r.Blocks {
		b := &r.Blocks[i]
		lp, problem, err := e.planLane(ctx, b, func() loaded { return ledger(b.ID) })
		if err != nil {
			return nil, nil, err
		}
		if problem != nil {
			plan.Problems = append(plan.Problems, *problem)
			continue
		}
		lanes = append(lanes, lp)
		plan.Lanes = append(plan.Lanes, lp.public)
	}
	if err := e.preflight(ctx, lanes, all, plan); err != nil {
		return nil, nil, err
	}
	return plan, lanes, nil
}

// Report is what staging a recipe did.
type Report struct {
	Node    string       `json:"node"`
	Mode    Mode         `json:"mode"`
	Lanes   []LaneReport `json:"lanes"`
	Evicted []LaneStatus `json:"evicted,omitempty"`
	Seconds float64      `json:"seconds"`
	Errors  []string     `json:"errors,omitempty"`
}

// Stage stages every lane of r: it locks them, plans, stops with a
// the plan's Err before writing anything if a check fails, evicts what
// the plan evicts, then stages lane by lane. A failed lane is recorded as
// failed and the others still run; the error joins the failures.
func (e *Engine) Stage(ctx context.Context, r *Recipe) (*Report, error) {
	start := time.Now()
	for i := range r.Blocks {
		lk, err := e.st.lock(r.Blocks[i].ID)
		if err != nil {
			return nil, err
		}
		defer lk.unlock()
	}
	all := e.allLedgers(ctx)
	plan, lanes, err := e.plan(ctx, r, all)
	if err != nil {
		return nil, err
	}
	rep := &Report{Node: e.st.Node, Mode: e.opts.Mode}
	if err := plan.Err(); err != nil {
		return rep, err
	}
	if len(plan.Evict) > 0 {
		ledgers, err := all()
		if err != nil {
			return nil, err
		}
		open := procs.OpenInodes()
		for _, ev := range plan.Evict {
			s, err := e.evict(ctx, ev.ID, ledgers, open)
			if err != nil {
				return rep, fmt.Errorf("evicting lane %s to stay under max_used: %w", ev.ID, err)
			}
			rep.Evicted = append(rep.Evicted, *s)
		}
		all = e.allLedgers(ctx) // as the evictions left them
	}
	// Every lane's ledger as it is when the first copy looks for identical
	// content.
	index := newContentIndex(all)
	var errs []error
	for _, lp := range lanes {
		lr, err := e.runLane(ctx, lp, index)
		rep.Lanes = append(rep.Lanes, *lr)
		if err != nil {
			errs = append(errs, fmt.Errorf("lane %s: %w", lp.b.ID, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	for _, err := range errs {
		rep.Errors = append(rep.Errors, err.Error())
	}
	return rep, errors.Join(errs...)
}

// LaneStatus is a lane as `staging ls` shows it.
type LaneStatus struct {
	ID       string    `json:"id"`
	Node     string    `json:"node"`
	Kind     string    `json:"kind"`
	State    string    `json:"state"`
	Src      string    `json:"src"`
	Dst      string    `json:"dst"`
	Verify   Verify    `json:"verify"`
	Files    int       `json:"files"`            // staged files, links not counted
	Bytes    int64     `json:"bytes"`            // the staged files' sizes
	Frees    int64     `json:"frees"`            // disk space evicting the lane frees
	InUse    string    `json:"in_use,omitempty"` // why it cannot be evicted now
	StagedAt time.Time `json:"staged_at,omitzero"`
	LastUsed time.Time `json:"last_used,omitzero"`
	Error    string    `json:"error,omitempty"`
}

func (e *Engine) status(l *Ledger, open map[procs.Inode]int) LaneStatus {
	s := LaneStatus{ID: l.ID, Node: l.Node, Kind: l.Kind, State: l.State, Src: l.Src, Dst: l.Dst, Verify: l.Verify,
		Files: l.files(), Bytes: l.Bytes, StagedAt: l.StagedAt, LastUsed: l.LastUsed, Error: l.Error}
	if open != nil && l.State != StateEvicted {
		s.Frees = footprint(l)
		s.InUse = e.busy(l, open)
	}
	return s
}

// List returns the status of every lane on this node, least recently
// used first.
func (e *Engine) List(ctx context.Context) ([]LaneStatus, error) {
	ledgers, err := e.ledgers(ctx)
	if err != nil {
		return nil, err
	}
	open := procs.OpenInodes()
	out := make([]LaneStatus, 0, len(ledgers))
	for _, l := range ledgers {
		out = append(out, e.status(l, open))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastUsed.Before(out[j].LastUsed) })
	return out, nil
}

// Env is the environment a lane's consumers get (emit_env): NAME=<path>,
// the container path when the lane is mounted; for sparse-rows also
// NAME_RANK and NAME_RANKS, and NAME_ROWS (table=first:end,...) from the
// staged entries.
func (b *Block) Env(entries []Entry) []string {
	if b.EmitEnv == "" {
		return nil
	}
	p := b.Dst
	if b.Mount != "" {
		p = b.Mount
	}
	env := []string{b.EmitEnv + "=" + p}
	if b.Kind == KindSparseRows && b.Partition == PartitionByRank {
		env = append(env, fmt.Sprintf("%s_RANK=%d", b.EmitEnv, *b.Rank), fmt.Sprintf("%s_RANKS=%d", b.EmitEnv, *b.Ranks))
	}
	var rows []string
	for _, en := range entries {
		for _, r := range en.Ranges {
			rows = append(rows, fmt.Sprintf("%s=%d:%d", r.Table, r.Rows[0], r.Rows[1]))
		}
	}
	if len(rows) > 0 {
		env = append(env, b.EmitEnv+"_ROWS="+strings.Join(rows, ","))
	}
	return env
}

// MountFlags are the nerdctl (and docker) flags that mount a lane read-only
// at its mount path: -v and the equivalent --mount.
func (b *Block) MountFlags() []string {
	if b.Mount == "" {
		return nil
	}
	return []string{"-v", b.Dst + ":" + b.Mount + ":ro",
		"--mount", "type=bind,src=" + b.Dst + ",dst=" + b.Mount + ",readonly"}
}
