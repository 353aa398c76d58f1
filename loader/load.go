package loader

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/resolve"
)

// Loader says how to make a model and fill it, from an artifact or from the
// canonical source.
type Loader[M Hydratable] struct {
	// Restorer fills a fresh model from the resolved artifact.
	Restorer Restorer[M]
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
// closed before Load returns (the restorer copies what it keeps). The one
// report covers resolution and restore.
func Load[M Hydratable](ctx context.Context, r *resolve.Runtime, req resolve.Request, l Loader[M]) (M, *resolve.Report, error) {
	var zero M
	ld := r.StartLoad(ctx, req)
	m, ok := zero, false
	if ld.Lease() != nil {
		m, ok = restore(ld, l)
	}
	if dir := ld.CanonicalDir(); dir != "" {
		m, ok = canonicalLoad(ld, l, dir)
	}
	rep, err := ld.Finish()
	if err != nil || !ok {
		return zero, rep, err
	}
	return m, rep, nil
}

// fresh makes a fresh model and checks it is empty.
func fresh[M Hydratable](ld *resolve.Loading, l Loader[M]) (M, *resolve.Failure) {
	t := time.Now()
	m, err := l.New(ld.Context())
	if err == nil && m.Hydration() != HydrationEmpty {
		err = fmt.Errorf("a new model is %s, not empty: %w", m.Hydration(), errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		ld.Step(resolve.StepModel, "", resolve.StepFailed, t, "")
		return m, &resolve.Failure{Kind: resolve.KindModel, Step: resolve.StepModel, Err: err}
	}
	ld.Step(resolve.StepModel, "", resolve.StepOK, t, "")
	return m, nil
}

// restore plans and commits the lease into a fresh model; on a failure it
// applies the table (a commit failure may fall back to the canonical source).
func restore[M Hydratable](ld *resolve.Loading, l Loader[M]) (M, bool) {
	var zero M
	m, f := fresh(ld, l)
	if f != nil {
		ld.Fail(f)
		return zero, false
	}
	ctx, source := ld.Context(), l.Restorer.Name()
	t := time.Now()
	plan, err := l.Restorer.PlanRestore(ctx, ld.Lease(), m)
	if err != nil {
		f := &resolve.Failure{Kind: resolve.KindRestorePlan, Step: resolve.StepPlan, Source: source, Err: err}
		if errdefs.IsNotImplemented(err) {
			f.Kind = resolve.KindUnsupported
		}
		ld.Step(resolve.StepPlan, source, resolve.StepFailed, t, string(f.Kind))
		ld.Fail(f)
		return zero, false
	}
	ld.Step(resolve.StepPlan, source, resolve.StepOK, t, "")
	t = time.Now()
	if err := plan.Commit(ctx); err != nil {
		m.MarkPartial() // whatever the restorer did, this model is never used
		f := &resolve.Failure{Kind: resolve.KindRestoreCommit, Step: resolve.StepCommit, Source: source, Retry: true, Err: err}
		if ctx.Err() != nil {
			f.Kind, f.Retry = resolve.KindCanceled, false
		}
		ld.Step(resolve.StepCommit, source, resolve.StepFailed, t, string(f.Kind))
		ld.Abandon(f) // no source is left after a restore: fall back or fail
		return zero, false
	}
	ld.Step(resolve.StepCommit, source, resolve.StepOK, t, "")
	return m, true
}

// canonicalLoad loads the canonical source into a fresh model.
func canonicalLoad[M Hydratable](ld *resolve.Loading, l Loader[M], dir string) (M, bool) {
	var zero M
	m, f := fresh(ld, l)
	if f != nil {
		ld.Fail(f)
		return zero, false
	}
	t := time.Now()
	if err := l.Canonical(ld.Context(), dir, m); err != nil {
		m.MarkPartial()
		ld.Step(resolve.StepCanonical, resolve.SourceCanonical, resolve.StepFailed, t, "load")
		ld.Fail(&resolve.Failure{Kind: resolve.KindModel, Step: resolve.StepCanonical, Source: resolve.SourceCanonical, Err: err})
		return zero, false
	}
	ld.Step(resolve.StepCanonical, resolve.SourceCanonical, resolve.StepOK, t, "load")
	return m, true
}
