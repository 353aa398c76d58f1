package resolve

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
)

// PublishAfterLoad publishes, after a model was loaded, the artifact of
// identity made by a POST_LOAD_ONLY producer (for instance the weights an
// engine transformed while loading), so later resolutions hit it. It is
// gated by allow_post_load_publish, returns its own report, closes the lease
// it gets before returning, and never changes a completed resolution: it
// shares nothing with it. In disabled mode it does nothing.
func (r *Runtime) PublishAfterLoad(ctx context.Context, identity artifact.Identity, p producers.PhasedProducer) (*Report, error) {
	a := r.newAttempt(ctx, ReportPostLoadPublish, Request{Identity: &identity})
	a.publish(p)
	a.rep.Duration = time.Since(a.start)
	l := log.G(ctx).WithField("id", a.rep.ID).WithField("outcome", a.rep.Outcome)
	if a.rep.Failure != nil {
		l.WithError(a.rep.Failure).Warn("post-load publication failed")
		return a.rep, a.rep.Failure
	}
	l.Debug("post-load publication done")
	return a.rep, nil
}

func (a *attempt) publish(p producers.PhasedProducer) {
	t := time.Now()
	skip := func(detail string, f *Failure) {
		a.rep.step(StepPublish, "", StepSkipped, t, detail)
		a.rep.Outcome, a.rep.Failure = OutcomeSkipped, f
	}
	switch {
	case a.r.cfg.Mode == Disabled:
		skip("resolution is disabled", nil)
		return
	case !a.r.cfg.AllowPostLoadPublish:
		skip("allow_post_load_publish is off", &Failure{Kind: KindPolicy, Step: StepPublish,
			Err: fmt.Errorf("post-load publication is not allowed: %w", errdefs.ErrPermissionDenied)})
		return
	case p == nil || p.Phase() != producers.PostLoadOnly:
		phase := producers.Phase("none")
		if p != nil {
			phase = p.Phase()
		}
		a.fail(&Failure{Kind: KindUnsupported, Step: StepPublish,
			Err: fmt.Errorf("post-load publication runs %s producers only, not %s: %w", producers.PostLoadOnly, phase, errdefs.ErrNotImplemented)})
		return
	}
	if !a.identify() || !a.openDomainOnly() {
		return
	}
	source := SourceProducerPrefix + p.Name()
	br, f := a.getOrBuild(StepPublish, source, func() (artifact.Producer, *Failure) { return p, nil }, false)
	if f == nil {
		if f = a.collision(StepPublish, source, br.lease); f == nil {
			br.lease.Close()
		}
	}
	if f != nil {
		a.rep.step(StepPublish, source, StepFailed, t, string(f.Kind))
		a.fail(f)
		return
	}
	s := a.rep.step(StepPublish, source, StepOK, t, "")
	s.Bytes = a.rep.BytesMoved
	a.rep.Outcome, a.rep.Source, a.rep.Path = OutcomePublished, source, br.lease.Dir
	if !br.built {
		a.rep.Outcome, a.rep.Source = OutcomePresent, SourceLocal
	}
}

// openDomainOnly opens the domain for a call that has no fallback.
func (a *attempt) openDomainOnly() bool {
	t := time.Now()
	d, err := a.r.Domain(a.ctx)
	if err != nil {
		a.rep.step(StepDomain, "", StepFailed, t, "")
		a.fail(classifyDomain(a.ctx, err, false))
		return false
	}
	a.rep.step(StepDomain, "", StepOK, t, "")
	a.dom = d
	return true
}
