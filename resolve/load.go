package resolve

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// Loader says how to make a model and fill it, from an artifact or from the
// canonical source.
type Loader[M artifact.Hydratable] struct {
	// Restorer fills a fresh model from the resolved artifact.
	Restorer artifact.Restorer[M]
	// New returns a fresh, empty model.
	New func(ctx context.Context) (M, error)
	// Canonical loads the canonical source directory into a fresh model.
	Canonical func(ctx context.Context, dir string, m M) error
}

// Load resolves a request and loads the result into a fresh model: the
// artifact through the restorer (PlanRestore, then one Commit), or the
// canonical source where the mode permits. A plan that fails leaves the
// model untouched and is visible. A commit that fails leaves the model
// partially hydrated: it is marked so and dropped, and in preferred mode the
// fallback loads the canonical source into another fresh model; required
// mode fails. A partially hydrated model is never returned. The lease is
// released before Load returns (the restorer copies what it keeps). The one
// report covers resolution and restore.
func Load[M artifact.Hydratable](ctx context.Context, r *Runtime, req Request, l Loader[M]) (M, *Report, error) {
	var zero M
	a := r.newAttempt(ctx, ReportLoad, req)
	a.run()
	m, ok := zero, false
	if a.lease != nil {
		m, ok = restore(a, l)
	}
	if a.rep.Outcome == OutcomeCanonical {
		m, ok = canonicalLoad(a, l)
	}
	res, err := a.finish()
	res.Close()
	if err != nil || !ok {
		return zero, a.rep, err
	}
	return m, a.rep, nil
}

// fresh makes a fresh model and checks it is empty.
func fresh[M artifact.Hydratable](a *attempt, l Loader[M]) (M, *Failure) {
	t := time.Now()
	m, err := l.New(a.ctx)
	if err == nil && m.Hydration() != artifact.HydrationEmpty {
		err = fmt.Errorf("a new model is %s, not empty: %w", m.Hydration(), errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		a.rep.step(StepModel, "", StepFailed, t, "")
		return m, &Failure{Kind: KindModel, Step: StepModel, Err: err}
	}
	a.rep.step(StepModel, "", StepOK, t, "")
	return m, nil
}

// restore plans and commits the lease into a fresh model; on a failure it
// applies the table (a commit failure may fall back to the canonical source).
func restore[M artifact.Hydratable](a *attempt, l Loader[M]) (M, bool) {
	var zero M
	m, f := fresh(a, l)
	if f != nil {
		a.fail(f)
		return zero, false
	}
	source := l.Restorer.Name()
	t := time.Now()
	plan, err := l.Restorer.PlanRestore(a.ctx, a.lease, m)
	if err != nil {
		f := &Failure{Kind: KindRestorePlan, Step: StepPlan, Source: source, Err: err}
		if errdefs.IsNotImplemented(err) {
			f.Kind = KindUnsupported
		}
		a.rep.step(StepPlan, source, StepFailed, t, string(f.Kind))
		a.fail(f)
		return zero, false
	}
	a.rep.step(StepPlan, source, StepOK, t, "")
	t = time.Now()
	if err := plan.Commit(a.ctx); err != nil {
		m.MarkPartial() // whatever the restorer did, this model is never used
		f := &Failure{Kind: KindRestoreCommit, Step: StepCommit, Source: source, Retry: true, Err: err}
		if a.ctx.Err() != nil {
			f.Kind, f.Retry = KindCanceled, false
		}
		a.rep.step(StepCommit, source, StepFailed, t, string(f.Kind))
		a.lease.Close()
		a.lease = nil
		a.stop(f) // no source is left after a restore: fall back or fail
		return zero, false
	}
	a.rep.step(StepCommit, source, StepOK, t, "")
	return m, true
}

// canonicalLoad loads the canonical source into a fresh model.
func canonicalLoad[M artifact.Hydratable](a *attempt, l Loader[M]) (M, bool) {
	var zero M
	m, f := fresh(a, l)
	if f != nil {
		a.fail(f)
		return zero, false
	}
	t := time.Now()
	if err := l.Canonical(a.ctx, a.rep.Path, m); err != nil {
		m.MarkPartial()
		a.rep.step(StepCanonical, SourceCanonical, StepFailed, t, "load")
		a.fail(&Failure{Kind: KindModel, Step: StepCanonical, Source: SourceCanonical, Err: err})
		return zero, false
	}
	a.rep.step(StepCanonical, SourceCanonical, StepOK, t, "load")
	return m, true
}

// A store lease is what restorers read.
var _ artifact.LeaseView = (*store.Lease)(nil)
