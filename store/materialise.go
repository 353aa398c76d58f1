package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
)

// Plan finds what to materialise: the identity and the producer that
// makes it (a remote's manifest and index read, a peer selected). It runs
// only when no valid artifact was found without it.
type Plan func(ctx context.Context) (artifact.Identity, artifact.Producer, error)

// MaterialiseOptions tune Materialise.
type MaterialiseOptions struct {
	// ID is the identity when the caller knows it before planning
	// and has not looked it up: a valid artifact under it is leased with no
	// planning at all. The zero ID plans first.
	ID artifact.ID
	// WaitBudget, if > 0, bounds the wait, after planning, for the build
	// lock and another process's build: spent before this call's producer
	// starts, the call stops (Materialised.WaitSpent); the producer, once
	// started, is never stopped by it, nor is another process's build.
	WaitBudget time.Duration
}

// Materialised says what Materialise did.
type Materialised struct {
	// Planned says the plan ran and gave a producer (a hit on ID plans nothing).
	Planned bool
	// Ran says this call's producer ran; ProduceErr is its own failure.
	Ran        bool
	ProduceErr error
	// Built says this call published the artifact; false for one found
	// valid (on ID, or published by another process meanwhile).
	Built bool
	// WaitSpent says the WaitBudget ran out before the producer started.
	WaitSpent bool
	// Transfer is what the producer moved, when it ran and reports it
	// (TransferReporter), with the timings of a build.
	Transfer *Transfer
	// Total is the whole call's time.
	Total time.Duration
}

// Materialise is the one way an artifact comes into the store from a
// transfer or a producer: a lookup of ID (a hit costs no planning),
// then the plan, then GetOrBuild (one build across processes), and a
// report of what happened. The lease is the caller's to close.
func (d *Domain) Materialise(ctx context.Context, plan Plan, o MaterialiseOptions) (*Lease, Materialised, error) {
	start := time.Now()
	var m Materialised
	done := func(l *Lease, err error) (*Lease, Materialised, error) {
		m.Total = time.Since(start)
		return l, m, err
	}
	if !o.ID.IsZero() {
		if l, err := d.Lookup(ctx, o.ID, ""); err == nil {
			return done(l, nil)
		}
	}
	identity, p, err := plan(ctx)
	if err != nil {
		return done(nil, err)
	}
	m.Planned = true
	gctx, g := newWaitGuard(ctx, o.WaitBudget)
	defer g.stop()
	tp := &timedProducer{Producer: p, g: g}
	l, res, err := d.GetOrBuild(gctx, identity, tp)
	m.Built, m.WaitSpent = res.Built, g.spent()
	m.Ran, m.ProduceErr = tp.ran, tp.err
	if r, ok := p.(TransferReporter); ok && tp.ran {
		t := r.Transfer()
		t.FetchSeconds = tp.took.Seconds()
		if res.Built {
			t.PublishSeconds = max(res.Produce-tp.took, 0).Seconds()
		}
		m.Transfer = &t
	}
	var ie *InterruptedError
	if pr, ok := p.(artifact.ProgressReporter); ok && errors.As(err, &ie) {
		_, ie.Total = pr.Progress()
	}
	return done(l, err)
}

// timedProducer runs a producer once the build lock is held, if the wait
// guard lets it, and times it. It hands the store's writer over as it is.
type timedProducer struct {
	artifact.Producer
	g    *waitGuard
	ran  bool
	took time.Duration
	err  error
}

func (p *timedProducer) Produce(ctx context.Context, w artifact.Writer) error {
	if !p.g.start() {
		return errWaitSpent
	}
	p.ran = true
	start := time.Now()
	p.err = p.Producer.Produce(ctx, w)
	p.took = time.Since(start)
	return p.err
}

// errWaitSpent is the cause of a wait stopped by MaterialiseOptions.WaitBudget.
var errWaitSpent = errors.New("coordination wait budget spent")

// waitGuard bounds the waiting part of a build: it cancels the build's
// context when the budget is spent before the producer starts, and never
// after. flock waits are polled, so stopping only drops this process's
// wait; another process's build is not touched. A zero budget never fires.
type waitGuard struct {
	cancel context.CancelCauseFunc
	timer  *time.Timer

	mu      sync.Mutex
	started bool
	fired   bool
}

// newWaitGuard is the guard of a build run with the returned context.
func newWaitGuard(parent context.Context, budget time.Duration) (context.Context, *waitGuard) {
	ctx, cancel := context.WithCancelCause(parent)
	g := &waitGuard{cancel: cancel}
	if budget > 0 {
		g.timer = time.AfterFunc(budget, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if !g.started {
				g.fired = true
				g.cancel(errWaitSpent)
			}
		})
	}
	return ctx, g
}

// start disarms the guard when the producer starts; false if it had fired.
func (g *waitGuard) start() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fired {
		return false
	}
	g.started = true
	g.stopTimer()
	return true
}

func (g *waitGuard) spent() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fired
}

func (g *waitGuard) stop() {
	g.stopTimer()
	g.cancel(nil)
}

func (g *waitGuard) stopTimer() {
	if g.timer != nil {
		g.timer.Stop()
	}
}
