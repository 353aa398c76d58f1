package resolve

import (
	"context"
	"sync"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/store"
)

// waitGuard bounds the waiting part of a store operation: it cancels the
// operation's context when the budget is spent before the operation's own
// producer starts, and never after. flock waits are polled, so stopping
// only drops this process's wait; another process's build is not touched.
type waitGuard struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer

	mu      sync.Mutex
	started bool
	fired   bool
}

func newWaitGuard(parent context.Context, budget time.Duration) *waitGuard {
	g := &waitGuard{}
	g.ctx, g.cancel = context.WithCancelCause(parent)
	g.timer = time.AfterFunc(budget, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.started {
			g.fired = true
			g.cancel(errWaitBudget)
		}
	})
	return g
}

// start disarms the guard when the producer starts; false if it had fired.
func (g *waitGuard) start() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fired {
		return false
	}
	g.started = true
	g.timer.Stop()
	return true
}

func (g *waitGuard) spent() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fired
}

func (g *waitGuard) stop() {
	g.timer.Stop()
	g.cancel(nil)
}

// guardedProducer runs a producer once the build lock is held. It hands
// the store's writer over as it is, so the producer sees every optional
// interface the writer has (artifact.Resumer and any other).
type guardedProducer struct {
	inner artifact.Producer
	g     *waitGuard
	ran   bool
	err   error
}

func (p *guardedProducer) Name() string { return p.inner.Name() }

func (p *guardedProducer) Produce(ctx context.Context, w artifact.Writer) error {
	if !p.g.start() {
		return errWaitBudget
	}
	p.ran = true
	p.err = p.inner.Produce(ctx, w)
	return p.err
}

func (p *guardedProducer) sourceBytes() int64 {
	if c, ok := p.inner.(producers.SourceCounter); ok {
		return c.SourceBytesRead()
	}
	return 0
}

func (p *guardedProducer) transfer() *Transfer {
	t, ok := p.inner.(TransferReporter)
	if !ok || !p.ran {
		return nil
	}
	endpoint, mode, rails, bytes := t.Transfer()
	return &Transfer{Endpoint: endpoint, Mode: mode, Rails: rails, Bytes: bytes}
}

// buildResult is one GetOrBuild through the guard.
type buildResult struct {
	lease    *store.Lease
	res      store.BuildResult
	transfer *Transfer
}

// getOrBuild runs store.GetOrBuild with the producer behind a wait guard
// and returns a typed failure.
func (a *attempt) getOrBuild(step, source string, p artifact.Producer, remote bool) (*buildResult, *Failure) {
	g := newWaitGuard(a.ctx, a.r.cfg.Wait.Budget())
	gp := &guardedProducer{inner: p, g: g}
	lease, res, err := a.dom.GetOrBuild(g.ctx, a.id, gp)
	spent := g.spent()
	g.stop()
	if gp.ran {
		a.rep.Counters.ProducerRuns++
		a.rep.Counters.SourceBytesRead += gp.sourceBytes()
	}
	if err == nil {
		if res.Built {
			a.rep.BytesMoved += lease.Index.TotalBytes()
		}
		return &buildResult{lease: lease, res: res, transfer: gp.transfer()}, nil
	}
	switch {
	case a.ctx.Err() != nil:
		return nil, &Failure{Kind: KindCanceled, Step: step, Source: source, Err: err}
	case spent || isTimeout(err):
		return nil, &Failure{Kind: KindCoordinationTimeout, Step: step, Source: source, Retry: true, Err: err}
	case gp.ran && gp.err != nil:
		return nil, classifyProducerError(step, source, err, remote)
	case gp.ran:
		f := classifyProducerError(step, source, err, false)
		if f.Kind == KindProducer {
			f.Kind = KindPublication
		}
		return nil, f
	}
	return nil, classifyLookup(a.ctx, step, source, err, false)
}
