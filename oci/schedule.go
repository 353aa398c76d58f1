package oci

// The transfer schedule of a pull: which file or range goes to which worker,
// the in-order writing of ranges, and the end of each file.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
	"golang.org/x/sync/errgroup"
)

// fileTask is one file being fetched. A file fetched in ranges is written
// in order: ranges arrive in any order, wait in their buffers, and whoever
// delivers the next one writes it and every parked successor, so the store
// hashes the file while it writes it.
type fileTask struct {
	f      PlanFile
	p      *puller
	w      artifact.Writer
	fw     artifact.FileWriter // created with the first bytes; only one goroutine writes at a time
	chunks int                 // ranges, 0 for a single stream
	from   int64               // where the fetch starts: a continued file's kept prefix ends there
	// piecesRecorded says the file's units' chaining values are recorded in the build (recordPieces).
	piecesRecorded bool

	done chan struct{} // closed once the file is complete and checked

	mu      sync.Mutex
	next    int // the next range to write
	parked  map[int]parkedRange
	writing bool
}

type parkedRange struct {
	buf *[]byte
	n   int
}

// job is one transfer: a whole blob as one stream (n < 0) or range idx.
type job struct {
	t      *fileTask
	idx    int
	off, n int64
}

// fetchAll fetches files in plan order through a pool of workers; a large
// file is cut into ranges when the registry serves them, so a few files are
// in flight at a time and each completes early (a killed pull then leaves
// complete files to resume from). Memory is bounded: a worker takes a
// buffer before it takes a job, so the earliest unwritten range always has
// one and the writer never waits on a buffer held by a later range; a
// buffer lent to the store comes back once its stages are through with it,
// whatever the workers do.
func (p *puller) fetchAll(ctx context.Context, w artifact.Writer, files []PlanFile) error {
	conc := p.o.Concurrency
	if conc <= 0 {
		conc = DefaultConcurrency
	}
	chunk := p.o.ChunkSize
	if chunk == 0 {
		chunk = DefaultChunkSize
	}
	if chunk > 0 {
		chunk = min(max(chunk, MinChunkSize), MaxChunkSize)
	}
	p.ranged = p.useRanges(ctx, files, chunk)
	nbuf := p.o.Buffers
	if nbuf <= 0 {
		nbuf = conc + 2
	}
	p.chunk, p.bufs = chunk, make(chan *[]byte, nbuf)
	tokens := make(chan struct{}, nbuf) // buffers in use: fetching or parked
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan job)
	for range conc {
		g.Go(func() error {
			for {
				select {
				case tokens <- struct{}{}:
				case <-gctx.Done():
					return gctx.Err()
				}
				j, ok := <-jobs
				if !ok {
					return nil
				}
				if err := p.run(gctx, ctx, j, tokens); err != nil {
					err = p.diagnose(gctx, j.t.f, err)
					return fmt.Errorf("fetch %s (%s): %w", j.t.f.Path, j.t.f.Layer.Digest, err)
				}
			}
		})
	}
	g.Go(func() error {
		defer close(jobs)
		return p.dispatch(gctx, w, files, chunk, jobs)
	})
	err := g.Wait()
	if err != nil {
		p.closeUnfinished()
	}
	return err
}

// closeUnfinished closes the files a failed fetch left open, once no
// goroutine writes them any more: Close stops the store writer's stages
// before the build is discarded.
func (p *puller) closeUnfinished() {
	p.openMu.Lock()
	defer p.openMu.Unlock()
	for t := range p.open {
		t.fw.Close()
		delete(p.open, t)
	}
}

// useRanges decides whether large files are cut into ranges. Each file is
// written, and hashed, in order, so ranges add speed only where one
// connection is slower than the hashing, or where whole-file streams cannot
// keep the workers busy; elsewhere they only add requests and copies, and a
// near registry is slower in ranges than as streams. So RangesAuto probes
// the registry's ranges (one byte of the first large blob) and cuts the
// files (rangesFor) when there are fewer of them than FilesInFlight, or when
// one connection is slow: the server is farRTT or more away, or is another
// host (object storage and CDNs, which limit each connection). Ranges are
// used only where the registry serves them.
func (p *puller) useRanges(ctx context.Context, files []PlanFile, chunk int64) bool {
	if chunk < 0 || p.o.Ranges == RangesOff {
		return false
	}
	large := 0
	var first PlanFile
	for _, f := range files {
		if f.Size > max(chunk, smallFile) {
			if large == 0 {
				first = f
			}
			large++
		}
	}
	if large == 0 {
		return false
	}
	probe := p.r.ProbeRanges(ctx, first.Layer)
	log.G(ctx).WithField("served", probe.Served).WithField("rtt", probe.RTT).WithField("redirected", probe.Redirected).Debug("registry ranges probed")
	return rangesFor(p.o.Ranges, large, p.filesInFlight(), probe)
}

// rangesFor is useRanges' choice for large files, of which inFlight are
// fetched at once, from a registry that answered probe.
func rangesFor(mode RangeMode, large, inFlight int, probe registry.RangeProbe) bool {
	switch {
	case !probe.Served:
		return false
	case mode == RangesOn, large < inFlight:
		return true
	}
	return probe.RTT >= farRTT || probe.Redirected
}

// farRTT is the round trip from which RangesAuto takes a registry for far:
// a stream keeps pace with the hashing only while its receive window covers
// the bandwidth-delay product, and Linux's default ceiling of 6 MiB covers a
// few milliseconds at the hashing's rate. Within a data centre a round trip
// takes well under one.
const farRTT = 2 * time.Millisecond

func (p *puller) filesInFlight() int {
	if p.o.FilesInFlight > 0 {
		return p.o.FilesInFlight
	}
	return artifact.FilesInFlight()
}

// dispatch hands out the jobs, the largest file first (in plan order for
// a pull that peers follow, seed.go): each file is hashed
// in order on one core, so a large file left to the end would finish the
// pull on one core while the others idle. Small files go straight to the
// workers. Large files open a few at a time (FilesInFlight): each has a
// feeder that hands out its ranges (or its one stream) and holds its slot
// until the file is complete, so at any moment at most that many large
// files are partly written (a killed pull leaves the rest complete, to be
// reused, or untouched) and their ranges interleave on the workers. It
// returns only once every feeder has: the caller then closes jobs.
func (p *puller) dispatch(ctx context.Context, w artifact.Writer, files []PlanFile, chunk int64, jobs chan<- job) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	open := p.filesInFlight()
	send := func(j job) error {
		select {
		case jobs <- j:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	feeders, fctx := errgroup.WithContext(ctx)
	feeders.SetLimit(open)
	// fail stops the feeders and waits for them before dispatch returns
	// err: a feeder left sending after jobs is closed would panic.
	fail := func(err error) error {
		cancel()
		feeders.Wait()
		return err
	}
	files = slices.Clone(files)
	if p.seed == nil { // peers follow a seeding pull in plan order (seed.go)
		slices.SortStableFunc(files, func(a, b PlanFile) int { return cmp.Compare(b.Size, a.Size) })
	}
	for _, f := range files {
		t := &fileTask{f: f, w: w, p: p, done: make(chan struct{})}
		if c, ok := p.continued[f.Path]; ok {
			t.fw, t.from = c.fw, c.off
			p.openMu.Lock()
			p.open[t] = struct{}{}
			p.openMu.Unlock()
		}
		switch {
		case f.Size == 0:
			if err := t.write(nil); err != nil {
				return fail(err)
			}
			if err := p.finish(ctx, t); err != nil {
				return fail(err)
			}
		case f.Size <= smallFile:
			if err := send(job{t: t, n: -1}); err != nil {
				return fail(err)
			}
		default:
			js := []job{{t: t, n: -1}}
			if p.ranged && f.Size-t.from > chunk {
				js = js[:0]
				for off := t.from; off < f.Size; off += chunk {
					js = append(js, job{t: t, idx: len(js), off: off, n: min(chunk, f.Size-off)})
				}
				t.chunks, t.parked = len(js), map[int]parkedRange{}
			}
			feeders.Go(func() error {
				for _, j := range js {
					if err := send(j); err != nil {
						return err
					}
				}
				select { // the slot is free once the file is complete
				case <-t.done:
					return nil
				case <-fctx.Done():
					return fctx.Err()
				}
			})
		}
	}
	return feeders.Wait()
}

// MinChunkSize and MaxChunkSize bound a pull's range size, of which Buffers are held in memory. A
// smaller ChunkSize is raised to MinChunkSize, a larger one lowered to MaxChunkSize.
const (
	MinChunkSize = 64 << 10
	MaxChunkSize = 256 << 20
)

// smallFile is the size up to which a file is one stream, never held to
// FilesInFlight: cheap to fetch again after a kill.
const smallFile = 4 << 20

// run performs one job; the worker holds one token, which run gives back
// (a fetched range keeps it until the store is through with its buffer).
// A range runs on until rangeGrace after the pull was cancelled (parent,
// an interrupt), so that the ranges in flight land and the file's written
// prefix, which an interrupted pull keeps, covers what was fetched.
func (p *puller) run(ctx, parent context.Context, j job, tokens chan struct{}) error {
	if j.n < 0 {
		<-tokens
		if err := p.stream(ctx, j.t); err != nil {
			return err
		}
		return p.finish(ctx, j.t)
	}
	bp := p.rangeBuffer()
	rctx, done := graceful(ctx, parent)
	err := p.fetchRange(rctx, j.t, j.off, (*bp)[:j.n])
	done()
	if err != nil {
		p.bufs <- bp
		<-tokens
		return err
	}
	return p.deliver(ctx, j.t, j.idx, parkedRange{bp, int(j.n)}, tokens)
}

// rangeGrace is how long a range in flight may still take once its pull
// was cancelled.
const rangeGrace = 2 * time.Second

// graceful is the context of a range in flight: it ends with ctx, the
// fetch's, when the fetch fails, but rangeGrace after parent when the
// pull is cancelled.
func graceful(ctx, parent context.Context) (context.Context, func()) {
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if parent.Err() == nil {
			cancel(context.Cause(ctx))
			return
		}
		time.AfterFunc(rangeGrace, func() { cancel(context.Cause(parent)) })
	})
	return rctx, func() {
		stop()
		cancel(nil)
	}
}

// rangeBuffer returns a free range buffer, making one while fewer than
// Buffers exist: the buffers are reused, never left to the garbage
// collector, so a pull's memory stays at Buffers ranges. The caller holds a
// token, hence room in p.bufs to give the buffer back.
func (p *puller) rangeBuffer() *[]byte {
	select {
	case bp := <-p.bufs:
		return bp
	default:
		b := make([]byte, p.chunk)
		return &b
	}
}

// deliver parks a fetched range and, unless another worker is writing the
// file, writes every range that is next in order, then finishes the file
// after its last range.
func (p *puller) deliver(ctx context.Context, t *fileTask, idx int, r parkedRange, tokens chan struct{}) error {
	t.mu.Lock()
	t.parked[idx] = r
	if t.writing {
		t.mu.Unlock()
		return nil
	}
	t.writing = true
	for {
		c, ok := t.parked[t.next]
		if !ok {
			t.writing = false
			t.mu.Unlock()
			return nil
		}
		delete(t.parked, t.next)
		t.mu.Unlock()
		if err := t.writeRange(c, func() {
			p.bufs <- c.buf
			<-tokens
		}); err != nil {
			return err
		}
		t.mu.Lock()
		t.next++
		if t.next == t.chunks {
			t.mu.Unlock()
			return p.finish(ctx, t)
		}
	}
}

// write appends the next bytes of the file, creating it in the store with
// its first bytes: a pull killed before a file's first bytes leaves no file
// of zeros for the next pull's resume to hash.
func (t *fileTask) write(b []byte) error {
	if t.fw == nil {
		if err := t.create(); err != nil {
			return err
		}
	}
	if len(b) == 0 {
		return nil
	}
	if _, err := t.fw.Write(b); err != nil {
		return err
	}
	return nil
}

// writeRange appends a range's bytes as write does and calls done once the
// range's buffer is free again: the writer hashes and writes the range
// from it (artifact.FileWriter.WriteBuffer), holding it meanwhile.
func (t *fileTask) writeRange(r parkedRange, done func()) error {
	if err := t.write(nil); err != nil { // creates the file with its first range
		done()
		return err
	}
	return t.fw.WriteBuffer((*r.buf)[:r.n], done)
}

// create creates the file in the store.
func (t *fileTask) create() error {
	fw, err := create(t.w, t.f.Binding)
	if err != nil {
		return err
	}
	t.fw = fw
	t.p.openMu.Lock()
	t.p.open[t] = struct{}{}
	t.p.openMu.Unlock()
	return nil
}

// create creates a file in the store's writer under its binding; a file
// that binds nothing computes every digest, which checkEntry then compares.
func create(w artifact.Writer, b artifact.Binding) (artifact.FileWriter, error) {
	if b.By != artifact.BindNone {
		return w.CreateBound(b)
	}
	return w.Create(b.Want.Path, b.Want.Size)
}

// finish closes a fully written file (the store completes its hashes) and
// checks the result before anything can be published. A continued file
// whose sha256 fails was not proved wrong by the registry (its prefix's
// record may not match the kept bytes): it is fetched again, whole.
func (p *puller) finish(ctx context.Context, t *fileTask) error {
	p.openMu.Lock()
	delete(p.open, t)
	p.openMu.Unlock()
	if err := t.fw.Close(); err != nil {
		if t.continuedWrong(err) {
			return p.refetch(ctx, t, err)
		}
		return fmt.Errorf("close %s: %w", t.f.Path, layerError(t.f, err))
	}
	got, err := t.fw.Entry()
	if err != nil {
		return fmt.Errorf("hash %s: %w", t.f.Path, err)
	}
	if err := p.checkEntry(t.f, got); err != nil {
		if t.continuedWrong(err) {
			return p.refetch(ctx, t, err)
		}
		return err
	}
	if err := p.verified(t.f); err != nil {
		return err
	}
	close(t.done)
	return nil
}

// continuedWrong says whether a continued file failed its check.
func (t *fileTask) continuedWrong(err error) bool {
	var em *artifact.EntryMismatchError
	return t.from > 0 && (errors.As(err, &em) || errdefs.IsDataLoss(err))
}

// refetch fetches a continued file again from its start, as one stream,
// after it failed its check.
func (p *puller) refetch(ctx context.Context, t *fileTask, cause error) error {
	log.G(ctx).WithError(cause).WithField("file", t.f.Path).Warn("pull: a file continued from an interrupted pull failed its check; fetching it again whole")
	if err := t.w.Drop(t.f.Path); err != nil {
		return err
	}
	p.reused.Add(-t.from)
	p.resumedFiles.Add(-1)
	fresh := &fileTask{f: t.f, w: t.w, p: p, done: t.done}
	if err := p.stream(ctx, fresh); err != nil {
		return err
	}
	return p.finish(ctx, fresh)
}
