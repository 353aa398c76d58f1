package resolve

import (
	"context"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/store"
)

// buildResult is one materialisation through the store.
type buildResult struct {
	lease    *store.Lease
	built    bool
	transfer *store.Transfer
}

// getOrBuild materialises the identity through the store
// (store.Domain.Materialise): plan gives the producer (a provider's, a
// local producer's) or the failure that ends this source; the build's waits
// are bounded by the WaitPolicy. It returns a typed failure.
func (a *attempt) getOrBuild(step, source string, plan func() (artifact.Producer, *Failure), remote bool) (*buildResult, *Failure) {
	var prod artifact.Producer
	var pf *Failure
	storePlan := func(context.Context) (artifact.Identity, artifact.Producer, error) {
		if prod, pf = plan(); pf != nil {
			return artifact.Identity{}, nil, pf
		}
		if remote {
			if pf = a.admit(step, source, prod); pf != nil {
				return artifact.Identity{}, nil, pf
			}
		}
		if a.req.OnProduce != nil {
			a.req.OnProduce(source, prod)
		}
		return a.id, prod, nil
	}
	lease, m, err := a.dom.Materialise(a.ctx, storePlan, store.MaterialiseOptions{WaitBudget: a.r.cfg.Wait.Budget()})
	if pf != nil {
		return nil, pf
	}
	if m.Ran {
		a.rep.Counters.ProducerRuns++
		if c, ok := prod.(producers.SourceCounter); ok {
			a.rep.Counters.SourceBytesRead += c.SourceBytesRead()
		}
	}
	if err == nil {
		if m.Built {
			a.rep.BytesMoved += lease.Index.TotalBytes()
		}
		br := &buildResult{lease: lease, built: m.Built, transfer: m.Transfer}
		return br, nil
	}
	switch {
	case a.ctx.Err() != nil:
		return nil, &Failure{Kind: KindCanceled, Step: step, Source: source, Err: err}
	case m.WaitSpent || isTimeout(err):
		return nil, &Failure{Kind: KindCoordinationTimeout, Step: step, Source: source, Retry: true, Err: err}
	case m.Ran && m.ProduceErr != nil:
		return nil, classifyProducerError(step, source, err, remote)
	case m.Ran && remote && errdefs.IsDataLoss(err):
		// The store refused what a remote producer wrote: its bytes are
		// not the ones its digests promised.
		return nil, &Failure{Kind: KindIntegrity, Step: step, Source: source, Err: err}
	case m.Ran:
		f := classifyProducerError(step, source, err, false)
		if f.Kind == KindProducer {
			f.Kind = KindPublication
		}
		return nil, f
	}
	return nil, classifyLookup(a.ctx, step, source, err, false)
}
