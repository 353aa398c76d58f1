package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
)

// FetchProducerName is the producer name a fetched artifact's READY.json records.
const FetchProducerName = "peer-fetch"

// FetchOptions tune a fetch.
type FetchOptions struct {
	Client ClientConfig
	// Mode is the data plane; "" is tcp.
	Mode Mode
	// Rails is how many rails to ask for; 0 means AutoRails.
	Rails int
	// Tensors, if set, fetches only the tensors whose names match one of
	// these patterns (path.Match syntax) into an artifact of their own.
	Tensors []string
	// Patience is how long a fetch keeps trying peers after a failure
	// without verifying any byte; 0 means DefaultPatience.
	Patience time.Duration
	// OnTotal, if set, is told the payload bytes the fetch will verify or
	// reuse, once it knows them, before any transfer.
	OnTotal func(int64)
	// Progress, if set, is told of payload bytes verified or reused; it is
	// called from several goroutines at once.
	Progress func(n int64)
	// Admit, if set, is asked by Fetch, once the peer's manifest is read
	// and before any payload byte, whether the artifact id it offers
	// (prod, whose CarriedRecords are what the peer sent) may be
	// published: the caller's trust policy. An error ends the fetch.
	Admit func(ctx context.Context, id artifact.ID, prod artifact.Producer) error
	// Hit, if set, is asked by Fetch, when the store holds the identity
	// asked for already, whether that artifact may serve the fetch: the
	// caller's trust policy over the store's recorded verification. When
	// it refuses, the fetch reads a peer's manifest and asks Admit, as for
	// an artifact the store lacks; what Admit accepts is kept beside the
	// store's artifact, whose bytes are not fetched again.
	Hit func(ctx context.Context, id artifact.ID) error
	// Structure is how the Provider's fetches find their sources; "" is
	// the chain. The forest needs Provider.Self.
	Structure Structure

	self string // Provider.Self, for orphanWait
}

// Defaults of FetchOptions.
const (
	MaxAutoRails    = 4
	DefaultPatience = 30 * time.Second
)

// AutoRails is how many rails a fetch asks for by default: one per core
// the process may use, at most MaxAutoRails. Each rail's bytes are hashed
// as they land, so more rails than cores only add switches between them.
func AutoRails() int {
	return min(MaxAutoRails, runtime.GOMAXPROCS(0))
}

// target is one file being written. A file of the artifact as the sender
// holds it is bound by its tensor tree: units land in it in any order, each
// tensor's BLAKE3 is reported as it lands, and the store derives the tree
// and binds the sender's sha256 without reading the file back. A file of a
// tensor subset is new: its units land in a scratch file, which is copied
// in order into the store (which hashes it as written) once all are verified.
type target struct {
	path    string
	want    artifact.FileEntry       // the record; for a subset file, all but its sha256 and tree
	fw      artifact.BoundFileWriter // a bound file; nil for a subset file
	out     io.WriterAt              // where tcp units land: fw or the scratch file
	mapping []byte                   // where rma units land: fw's mapping or the scratch file's
	scratch *os.File                 // a subset file's bytes, unlinked
	pending atomic.Int64
}

// fetcher is the producer of a fetch: it writes every target through the
// store's writer from one peer's session, and on a failure from the next
// peer's, resuming with the ranges not yet verified. The sources say which
// peer each session is with (fetch_sources.go), the unit table what is
// left to verify (fetch_units.go), the statistics what the fetch did
// (fetch_stats.go).
type fetcher struct {
	o        FetchOptions
	base     *wire.WeightManifest
	subset   *subsetPlan
	identity artifact.Identity
	w        artifact.Writer // Produce's
	seed     artifact.Seeder // the same writer, when this node serves what it fetches (fetch_seed.go)
	scratch  string          // directory of a subset's scratch files (the store's filesystem)
	// checkSHA256: the trust this fetch is admitted under rests on its
	// files' sha256 (CheckSHA256), which are checked, not the sender's word.
	checkSHA256 bool

	src     *sources
	forest  *forestPlan // set: the fetch takes each stripe from its source in the striped forest (fetch_forest.go)
	units   unitTable
	closing targetCloser
	stats   fetchStats
}

// targetCloser closes targets in the background, a few at a time, and
// keeps their failures.
type targetCloser struct {
	wg    sync.WaitGroup
	slots chan struct{}
	mu    sync.Mutex
	err   error
}

func (f *fetcher) Name() string { return FetchProducerName }

// Progress implements artifact.ProgressReporter; the total of a tensor
// subset is not known before its units are.
func (f *fetcher) Progress() (done, total int64) {
	if f.subset == nil {
		total = f.base.TotalBytes()
	}
	return f.stats.done(), total
}

// Produce implements artifact.Producer.
func (f *fetcher) Produce(ctx context.Context, w artifact.Writer) error {
	f.closing.slots = make(chan struct{}, runtime.GOMAXPROCS(0))
	f.w = w
	if f.subset == nil && w.Seeding() {
		if err := announce(w, f.base); err != nil {
			return err
		}
		f.seed = w
	}
	if f.subset == nil {
		// The manifest gives the size: room is made, or refused, before any byte.
		var total int64
		for _, s := range f.base.Shards {
			total += s.Size
		}
		if err := w.Reserve(total); err != nil {
			return err
		}
	}
	err := f.prepare(ctx, w)
	if err == nil {
		if f.o.OnTotal != nil {
			f.o.OnTotal(f.stats.reused.Load() + f.units.bytes())
		}
		f.stats.progress(f.stats.reused.Load())
		err = f.fetchAll(ctx)
	}
	f.closing.wg.Wait()
	for _, t := range f.units.targets {
		if t.scratch != nil {
			unmapScratch(t)
			t.scratch.Close()
		}
	}
	if err != nil {
		return err
	}
	return f.closing.err
}

// prepare creates (or reuses) every target and lists the units to fetch.
func (f *fetcher) prepare(ctx context.Context, w artifact.Writer) error {
	if f.subset != nil {
		return f.subset.prepare(f)
	}
	for i, s := range f.base.Shards {
		bind := artifact.Binding{Want: s.FileEntry, By: artifact.BindTree, CheckSHA256: f.checkSHA256}
		// A kept file, whole or in part, is checked unit by unit: one
		// read, whatever the interrupted fetch wrote of it.
		fw, r, ok, err := w.ContinueBound(bind)
		if err != nil {
			return fmt.Errorf("continue %s: %w", s.Path, err)
		}
		if ok {
			t, err := f.adoptBound(bind, fw)
			if err != nil {
				return err
			}
			if err := f.continueTarget(ctx, t, r, shardUnits(i, s, t)); err != nil {
				return err
			}
			continue
		}
		t, err := f.createBound(bind)
		if err != nil {
			return err
		}
		if err := f.addUnits(t, shardUnits(i, s, t)); err != nil {
			return err
		}
	}
	return nil
}

// createBound creates a target bound by the sender's tensor tree, mapped
// for the rma plane.
func (f *fetcher) createBound(bind artifact.Binding) (*target, error) {
	fw, err := f.w.CreateBound(bind)
	if err != nil {
		return nil, err
	}
	return f.adoptBound(bind, fw)
}

// adoptBound makes a target of a bound file the store created or kept.
func (f *fetcher) adoptBound(bind artifact.Binding, fw artifact.BoundFileWriter) (*target, error) {
	t := &target{path: bind.Want.Path, want: bind.Want, fw: fw, out: fw}
	f.units.addTarget(t)
	if f.o.Mode == ModeRMA {
		m, err := fw.Map()
		if err != nil {
			return nil, fmt.Errorf("map %s: %w", t.path, err)
		}
		t.mapping = m
	}
	return t, nil
}

// closeTarget finishes a target: the store derives a bound file's tree and
// binds the sender's sha256; a subset file is copied in order into a new
// store file, and what the store computed is checked against the record.
func (f *fetcher) closeTarget(t *target) {
	c := &f.closing
	c.wg.Go(func() {
		c.slots <- struct{}{}
		defer func() { <-c.slots }()
		var err error
		if t.scratch != nil {
			err = f.copySubset(t)
		} else if err = t.fw.Close(); err != nil {
			err = fmt.Errorf("fetched %s: %w", t.path, err)
		}
		if err != nil {
			c.mu.Lock()
			c.err = errors.Join(c.err, err)
			c.mu.Unlock()
		}
	})
}

// Waits between failed sessions: from retryFirst, doubling up to retryMax,
// back to retryFirst once a session verified bytes.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 1600 * time.Millisecond
)

// fetchAll runs sessions until every unit is verified: the selection's
// first, then, after a failure of a peer or the wire, the next peer's,
// with the units still missing.
func (f *fetcher) fetchAll(ctx context.Context) error {
	if f.forest != nil {
		return f.fetchForest(ctx)
	}
	b := &backoff.ExponentialBackOff{InitialInterval: retryFirst, Multiplier: 2, MaxInterval: retryMax}
	failures := 0
	var since time.Time // of the first failure since the last progress
	session := func() (struct{}, error) {
		for {
			todo := f.units.remaining()
			cs := f.src.take()
			if len(todo) == 0 {
				if cs != nil {
					cs.finish()
				}
				return struct{}{}, nil
			}
			var err error
			if cs == nil {
				cs, err = f.src.next(ctx)
			}
			before := f.stats.fetched.Load()
			if err == nil {
				if err = f.runSession(ctx, cs, todo); err == nil {
					err = cs.finish()
				} else {
					cs.close()
					if errdefs.IsDataLoss(err) {
						f.src.refuse(cs.addr) // it served a unit that did not match: not asked again
					}
				}
			}
			if err == nil {
				continue // a last check: nothing left
			}
			if ctx.Err() != nil {
				return struct{}{}, backoff.Permanent(fmt.Errorf("fetch interrupted: %w", context.Cause(ctx)))
			}
			if !peerFault(err) {
				return struct{}{}, backoff.Permanent(err)
			}
			if f.stats.fetched.Load() > before || failures == 0 {
				failures, since = 0, time.Now()
				b.Reset()
			}
			failures++
			var ns *noSourceError
			if errors.As(err, &ns) && time.Since(since) > f.src.orphanWait(ctx) {
				// Another source may be the registry: resolution goes on to it.
				log.G(ctx).WithError(err).WithField("depth", f.src.depth).WithField("waited", time.Since(since).Round(time.Millisecond)).
					Warn("peer: no source left nearer a complete source; leaving the fetch")
				return struct{}{}, backoff.Permanent(fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable))
			}
			if time.Since(since) > f.o.Patience && failures > len(f.src.peers) {
				return struct{}{}, backoff.Permanent(fmt.Errorf("giving up after %d failed sessions in %s without progress: %w", failures, f.o.Patience, err))
			}
			return struct{}{}, err
		}
	}
	notify := func(err error, _ time.Duration) {
		f.stats.sessions.Failovers++
		log.G(ctx).WithError(err).WithField("left", len(f.units.remaining())).Warn("peer: session failed; resuming from the next peer")
	}
	_, err := backoff.Retry(ctx, session, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0), backoff.WithNotify(notify))
	return err
}

// runSession fetches todo over one session's data plane: unit i of todo on
// rail i % rails.
func (f *fetcher) runSession(ctx context.Context, cs *clientSession, todo []*unit) error {
	if err := f.use(ctx, cs); err != nil {
		return err
	}
	rails := f.o.Rails
	if cs.manifest.Building {
		// A builder's units come as it verifies them, in order: one rail
		// takes each whole at the link's rate, so this node can pass it on
		// one unit after its source, not two.
		rails = 1
	}
	if err := cs.startPlane(ctx, f.o.Mode, rails); err != nil {
		return err
	}
	f.stats.sessions.Mode, f.stats.sessions.Rails = cs.mode, cs.rails
	byRail := make([][]*unit, cs.rails)
	for i, u := range todo {
		byRail[i%cs.rails] = append(byRail[i%cs.rails], u)
	}
	log.G(ctx).WithField("peer", cs.addr).WithField("mode", cs.mode).WithField("rails", cs.rails).
		WithField("units", len(todo)).Debug("peer: fetching")
	if cs.mode == ModeRMA {
		return f.runRMA(ctx, cs, byRail)
	}
	return f.runTCP(ctx, cs, byRail)
}
