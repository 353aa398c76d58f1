package resolve

import (
	"context"
	"time"

	"github.com/weightsnap/weightsnap/store"
)

// Loading is a resolution held open while a loader (package loader) fills
// a model from it: the steps the loader takes join the resolution's one
// report, and a restore that fails part way falls back, or fails, as the
// mode says. Finish ends it and closes the lease.
type Loading struct{ a *attempt }

// StartLoad resolves req for a load; the resolution has ended (a lease, the
// canonical source or a failure) when it returns.
func (r *Runtime) StartLoad(ctx context.Context, req Request) *Loading {
	a := r.newAttempt(ctx, ReportLoad, req)
	a.run()
	return &Loading{a}
}

// Context is the load's context.
func (l *Loading) Context() context.Context { return l.a.ctx }

// Lease is the resolved artifact; nil when the resolution ended on the
// canonical source or a failure, or after Abandon.
func (l *Loading) Lease() *store.Lease { return l.a.lease }

// CanonicalDir is the canonical source directory when the resolution (or
// the fallback after Abandon) ended on it, "" otherwise.
func (l *Loading) CanonicalDir() string {
	if l.a.rep.Outcome != OutcomeCanonical {
		return ""
	}
	return l.a.rep.Path
}

// Step records a step of the load (StepModel, StepPlan, StepCommit,
// StepCanonical) in the report, timed from start; outcome is StepOK or
// StepFailed, detail a short word or "".
func (l *Loading) Step(name, source, outcome string, start time.Time, detail string) {
	l.a.rep.step(name, source, outcome, start, detail)
}

// Fail ends the load with f: no model is returned and the lease is closed.
func (l *Loading) Fail(f *Failure) { l.a.fail(f) }

// Abandon closes the lease after a restore failed part way, leaving no
// source to try, and applies the mode to f: the canonical fallback
// (CanonicalDir then says where) or the failure.
func (l *Loading) Abandon(f *Failure) {
	l.a.lease.Close()
	l.a.lease = nil
	l.a.stop(f)
}

// Finish ends the load: it closes the lease and returns the report,
// with the report's failure as the error.
func (l *Loading) Finish() (*Report, error) {
	res, err := l.a.finish()
	res.Close()
	return l.a.rep, err
}
