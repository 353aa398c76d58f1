package staging

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Verified files are journaled in batches: after journalBatch of them or
// Options.JournalEvery, the destination filesystem is synced (one syncfs),
// then their entries are appended to the journal and it is synced.
const journalBatch = 1024

// outcome is what staging one item did.
type outcome int

const (
	outUnchanged outcome = iota // the ledger and a content check said it is complete
	outAdopted                  // found on the destination and verified there
	outLinked                   // hardlinked to identical content staged before
	outCopied                   // copied and verified
	outCreated                  // a link written
)

// LaneReport is what staging one lane did.
type LaneReport struct {
	ID          string   `json:"id"`
	Kind        string   `json:"kind"`
	Src         string   `json:"src"`
	Dst         string   `json:"dst"`
	State       string   `json:"state"`
	Trusted     bool     `json:"trusted,omitempty"` // --stage skip: the ledger said staged, nothing checked
	Files       int      `json:"files"`             // staged files, links not counted
	Bytes       int64    `json:"bytes"`
	Unchanged   int      `json:"unchanged"`
	Copied      int      `json:"copied"`
	CopiedBytes int64    `json:"copied_bytes"`
	Linked      int      `json:"linked"`
	Adopted     int      `json:"adopted"`
	Links       int      `json:"links_written"`
	Removed     int      `json:"removed"`
	Seconds     float64  `json:"seconds"`
	Notes       []string `json:"notes,omitempty"`
	Env         []string `json:"env,omitempty"`
	Mounts      []string `json:"mount_flags,omitempty"`
}

// laneRun stages one lane.
type laneRun struct {
	e        *Engine
	lp       *lanePlan
	b        *Block
	index    *contentIndex // staged blobs of every lane, for hardlinks
	progress func(int64)
	dirs     sync.Map // destination folders known to exist

	mu      sync.Mutex
	done    map[string]Entry
	journal *journal
	queued  int
	flushed time.Time
	rep     LaneReport
}

func (e *Engine) runLane(ctx context.Context, lp *lanePlan, index *contentIndex) (*LaneReport, error) {
	start := time.Now()
	b := lp.b
	r := &laneRun{e: e, lp: lp, b: b, index: index, done: make(map[string]Entry, len(lp.items)), flushed: start,
		rep: LaneReport{ID: b.ID, Kind: b.Kind, Src: b.Src, Dst: b.Dst, Notes: lp.notes}}
	l := lp.ledger
	l.Kind, l.Src, l.Dst, l.Verify = b.Kind, b.Src, b.Dst, b.Verify
	if lp.trusted {
		r.rep.Trusted = true
		l.LastUsed = time.Now()
		return r.finish(start, e.st.Save(l, artifact.Volatile))
	}
	pr := e.progress(b.ID, lp.public.CopyBytes)
	defer pr.Done()
	var pmu sync.Mutex
	r.progress = func(n int64) { pmu.Lock(); pr.Add(n); pmu.Unlock() }

	if err := os.MkdirAll(b.Dst, 0o755); err != nil {
		return r.finish(start, ioerr.Classify(err, nil))
	}
	if l.State != StateStaged {
		r.removeTemps()
	}
	err := r.stageItems(ctx)
	if err == nil {
		// The ledger saved at the end records every entry: the last
		// batch's files are made durable, and journaled only if the lane
		// stops before that save.
		err = r.syncQueued()
	}
	if err != nil {
		if ferr := r.flush(); ferr != nil {
			log.G(ctx).WithError(ferr).Warn("staging: could not journal a failed lane's files")
		}
		r.closeJournal()
		l.set(r.entries()...)
		l.State, l.Error = StateFailed, err.Error()
		if serr := e.st.Save(l, artifact.Durable); serr != nil {
			log.G(ctx).WithError(serr).Warn("staging: could not record a failed lane")
		}
		return r.finish(start, ioerr.Classify(err, nil))
	}
	removed, err := e.removeStale(ctx, l, r.done)
	r.rep.Removed = removed
	if err != nil {
		if ferr := r.journalQueued(); ferr != nil {
			log.G(ctx).WithError(ferr).Warn("staging: could not journal staged files")
		}
		r.closeJournal()
		return r.finish(start, err)
	}
	r.closeJournal()
	l.replace(r.entries())
	now := time.Now()
	changed := r.journal != nil || removed > 0 || l.State != StateStaged
	l.State, l.StagedAt, l.LastUsed = StateStaged, now, now
	return r.finish(start, e.st.Save(l, changed))
}

func (r *laneRun) finish(start time.Time, err error) (*LaneReport, error) {
	l := r.lp.ledger
	r.rep.State, r.rep.Files, r.rep.Bytes = l.State, l.files(), l.Bytes
	r.rep.Seconds = time.Since(start).Seconds()
	r.rep.Env, r.rep.Mounts = r.b.Env(l.Entries), r.b.MountFlags()
	return &r.rep, err
}

// removeTemps removes the temp files a stopped or crashed run may have
// left beside the lane's files.
func (r *laneRun) removeTemps() {
	for _, it := range r.lp.items {
		os.Remove(filepath.Join(r.b.Dst, filepath.FromSlash(it.path)) + tmpSuffix)
	}
}

// stageItems stages every item: blobs of one name in order (so the second
// links to the first), the rest concurrently, links last.
func (r *laneRun) stageItems(ctx context.Context) error {
	var tasks [][]item
	var links []item
	group := map[string]int{}
	for _, it := range r.lp.items {
		switch {
		case it.kind == EntryLink:
			links = append(links, it)
		case it.kind == EntryBlob:
			if i, ok := group[it.name]; ok {
				tasks[i] = append(tasks[i], it)
				continue
			}
			group[it.name] = len(tasks)
			tasks = append(tasks, []item{it})
		default:
			tasks = append(tasks, []item{it})
		}
	}
	// Workers take the next task themselves, in order: no goroutine hands
	// them out, so a run of thousands of small checks does not wake a
	// thread per file.
	g, gctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range max(r.e.opts.Workers, 1) {
		g.Go(func() error {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(tasks)) || gctx.Err() != nil {
					return nil
				}
				for _, it := range tasks[i] {
					if err := r.stageOne(gctx, it); err != nil {
						return err
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, it := range links {
		if err := r.stageOne(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

func (r *laneRun) stageOne(ctx context.Context, it item) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	src := filepath.Join(r.b.Src, filepath.FromSlash(it.path))
	if it.kind == EntrySparse {
		src = filepath.Join(r.lp.srcRoot, filepath.FromSlash(it.path))
	}
	dst := filepath.Join(r.b.Dst, filepath.FromSlash(it.path))
	var e Entry
	var out outcome
	var err error
	switch it.kind {
	case EntryLink:
		e, out, err = r.ensureLink(it, dst)
	default:
		e, out, err = r.ensureFile(ctx, it, src, dst)
	}
	if err != nil {
		return err
	}
	return r.record(e, out, it)
}

// record notes a staged item; changed ones are journaled.
func (r *laneRun) record(e Entry, out outcome, it item) error {
	if e.Kind == EntryBlob && out != outUnchanged { // an unchanged one is in its ledger, which the index reads
		r.index.add(filepath.Join(r.b.Dst, filepath.FromSlash(e.Path)), e)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done[e.Path] = e
	if out == outUnchanged {
		r.rep.Unchanged++
		return nil
	}
	if err := r.beginLocked(); err != nil {
		return err
	}
	switch out {
	case outAdopted:
		r.rep.Adopted++
	case outLinked:
		r.rep.Linked++
	case outCopied:
		r.rep.Copied++
		r.rep.CopiedBytes += it.size
	case outCreated:
		r.rep.Links++
	}
	if err := r.journal.add(e); err != nil {
		return err
	}
	r.queued++
	if r.queued >= journalBatch || time.Since(r.flushed) >= r.e.opts.JournalEvery {
		return r.flushLocked()
	}
	return nil
}

// beginLocked marks the lane as being staged, before its first change:
// after a crash its ledger says staging, and the journal holds what was
// verified. A run that changes nothing writes only its final ledger.
func (r *laneRun) beginLocked() error {
	if r.journal != nil {
		return nil
	}
	l := r.lp.ledger
	l.State, l.Error = StateStaging, ""
	if err := r.e.st.Save(l, artifact.Durable); err != nil {
		return err
	}
	j, err := r.e.st.openJournal(r.b.ID)
	if err != nil {
		return err
	}
	r.journal = j
	return nil
}

func (r *laneRun) flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushLocked()
}

// flushLocked makes the queued entries' files durable, then journals them.
func (r *laneRun) flushLocked() error {
	r.flushed = time.Now()
	if r.queued == 0 || r.journal == nil {
		return nil
	}
	if err := syncFS(r.b.Dst); err != nil {
		return err
	}
	r.queued = 0
	return r.journal.flush()
}

// syncQueued makes the queued entries' files durable without journaling
// them (journalQueued does, if the ledger is not saved after all).
func (r *laneRun) syncQueued() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queued == 0 || r.journal == nil {
		return nil
	}
	if err := syncFS(r.b.Dst); err != nil {
		return err
	}
	r.queued = 0
	return nil
}

// journalQueued journals the entries syncQueued made durable.
func (r *laneRun) journalQueued() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.journal == nil {
		return nil
	}
	return r.journal.flush()
}

// closeJournal closes the journal, if the run opened one (r.journal stays
// set: the run changed something).
func (r *laneRun) closeJournal() {
	if r.journal != nil {
		r.journal.close()
	}
}

func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

// entries lists the entries this run staged or checked.
func (r *laneRun) entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, 0, len(r.done))
	for _, e := range r.done {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// mkdirFor creates the parent folders of a destination path, once each.
func (r *laneRun) mkdirFor(dst string) error {
	dir := filepath.Dir(dst)
	if _, ok := r.dirs.Load(dir); ok {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.dirs.Store(dir, true)
	return nil
}

// install sets a verified temp file's mode and mtime from its source,
// renames it into place and records the result's stat in e. The source's
// pages are dropped.
func (r *laneRun) install(e Entry, out *os.File, tmp, dst string, in *os.File) (Entry, error) {
	fi, err := in.Stat()
	if err == nil {
		err = out.Chmod(fi.Mode().Perm())
	}
	if err == nil {
		err = os.Chtimes(tmp, fi.ModTime(), fi.ModTime())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return Entry{}, err
	}
	dropCache(in, 0, 0)
	return withStat(e, dst)
}

// withStat records the staged file's identity in e.
func withStat(e Entry, dst string) (Entry, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil {
		return Entry{}, fmt.Errorf("stat %s: %w", dst, err)
	}
	e.Dev, e.Ino, e.MtimeNs = st.Dev, st.Ino, st.Mtim.Nano()
	return e, nil
}

// dstMatches reports whether the staged file at dst is still the one e
// recorded: same inode, size and mtime.
func dstMatches(dst string, e Entry) bool {
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Dev == e.Dev && st.Ino == e.Ino && st.Size == e.Size && st.Mtim.Nano() == e.MtimeNs
}
