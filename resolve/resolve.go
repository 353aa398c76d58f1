package resolve

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/fingerprint"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/store"
)

// attempt is one call's state.
type attempt struct {
	r     *Runtime
	ctx   context.Context
	req   Request
	rep   *Report
	start time.Time

	dom   *store.Domain
	fp    *fingerprint.Result
	fpErr *Failure
	id    artifact.Identity
	known bool // id is set; false while only the digest (rep.Identity) is known
	lease *store.Lease
	last  *Failure // the last recoverable failure
	done  bool
}

func (r *Runtime) newAttempt(ctx context.Context, kind string, req Request) *attempt {
	return &attempt{r: r, ctx: ctx, req: req, rep: newReport(kind, r.cfg.Mode), start: time.Now()}
}

// Resolve resolves one request. It always returns a Resolution whose Report
// is terminal; on failure the error is the report's *Failure. The caller
// closes the Resolution.
func (r *Runtime) Resolve(ctx context.Context, req Request) (*Resolution, error) {
	a := r.newAttempt(ctx, ReportResolve, req)
	a.run()
	return a.finish()
}

// run walks the resolution order until a source wins or a failure ends it.
func (a *attempt) run() {
	if a.r.cfg.Mode == Disabled {
		a.canonical(nil)
		return
	}
	if !a.openDomain() || !a.identify() {
		return
	}
	if a.lookup() {
		return
	}
	providers, ok := a.providers()
	if !ok {
		return
	}
	for _, p := range providers {
		if a.remote(p) {
			return
		}
	}
	if a.local() {
		return
	}
	a.end()
}

// recover applies the table to a failure; true when resolution is over.
func (a *attempt) recover(f *Failure) bool {
	switch rule := Decide(a.r.cfg.Mode, f); rule.Step {
	case ActionNext:
		a.last = f
		a.rep.Recovered = append(a.rep.Recovered, f)
		l := log.G(a.ctx).WithField("step", f.Step).WithField("source", f.Source).WithField("kind", f.Kind).WithError(f.Err)
		switch f.Kind {
		case KindIntegrity: // never published; someone has a source to fix
			l.Warn("resolve: the source served bytes that failed verification; trying the next source")
		case KindUnsigned: // never published
			l.Warn("resolve: the source brought no signature the trust policy accepts; trying the next source")
		case KindUnreachable:
			l.Info("resolve: the source is unreachable; trying the next source")
		default:
			l.Debug("resolve: trying the next source")
		}
		return false
	case ActionCanonical:
		a.canonical(f)
	default:
		a.fail(f)
	}
	return true
}

// stop ends resolution after a failure that leaves no source to try: the
// canonical fallback where the table allows it, the failure otherwise.
func (a *attempt) stop(f *Failure) bool {
	rule := Decide(a.r.cfg.Mode, f)
	if rule.Step == ActionFail || rule.End == ActionFail {
		a.fail(f)
		return false
	}
	a.rep.Recovered = append(a.rep.Recovered, f)
	a.canonical(f)
	return false
}

// end is the resolution that every source passed over: the canonical
// source when the End action of every failure passed over allows it, or
// else the failure of every source (SourcesError).
func (a *attempt) end() {
	f := a.last
	if f == nil {
		f = &Failure{Kind: KindMiss, Step: StepLookup, Err: fmt.Errorf("no source has identity %s: %w", a.rep.ID, store.ErrMiss)}
	}
	end, why := ActionCanonical, ""
	for _, r := range append(slices.Clone(a.rep.Recovered), f) {
		if Decide(a.r.cfg.Mode, r).End == ActionFail {
			end = ActionFail
			if why == "" || r.Kind == KindIntegrity {
				why = TableRow(r)
			}
		}
	}
	if end == ActionCanonical && a.req.Source != "" {
		a.canonical(f)
		return
	}
	detail := "no canonical source directory"
	switch {
	case a.req.Source == "":
	case a.r.cfg.Mode == Required:
		detail = "required mode never falls back to the canonical source"
	default:
		detail = why + ": resolution does not fall back to the canonical source after it"
	}
	a.rep.step(StepCanonical, SourceCanonical, StepSkipped, time.Now(), detail)
	a.fail(a.exhausted(f))
}

func (a *attempt) fail(f *Failure) {
	if a.lease != nil {
		a.lease.Close()
		a.lease = nil
	}
	a.rep.Outcome, a.rep.Failure, a.rep.Source, a.rep.Path = OutcomeFailed, f, "", ""
	a.done = true
}

// canonical serves the canonical source; it does not touch it.
func (a *attempt) canonical(cause *Failure) {
	t := time.Now()
	if a.req.Source == "" {
		f := cause
		if f == nil {
			f = &Failure{Kind: KindInvalidRequest, Step: StepCanonical, Err: fmt.Errorf("no canonical source directory to fall back to: %w", errdefs.ErrInvalidArgument)}
		}
		a.rep.step(StepCanonical, SourceCanonical, StepSkipped, t, "no canonical source directory")
		a.fail(f)
		return
	}
	dir, err := filepath.Abs(a.req.Source)
	if err != nil {
		a.fail(&Failure{Kind: KindInvalidRequest, Step: StepCanonical, Err: err})
		return
	}
	a.rep.step(StepCanonical, SourceCanonical, StepOK, t, "")
	a.rep.Outcome, a.rep.Source, a.rep.Path = OutcomeCanonical, SourceCanonical, dir
	a.done = true
}

// win records the source that won.
func (a *attempt) win(outcome Outcome, source string, l *store.Lease) {
	a.lease = l
	a.rep.Outcome, a.rep.Source, a.rep.Path = outcome, source, l.Dir
	a.done = true
}

func (a *attempt) finish() (*Resolution, error) {
	a.rep.Duration = time.Since(a.start)
	res := &Resolution{Report: a.rep, Lease: a.lease, Path: a.rep.Path}
	l := log.G(a.ctx).WithField("id", a.rep.ID).WithField("mode", a.rep.Mode).
		WithField("outcome", a.rep.Outcome).WithField("source", a.rep.Source).WithField("seconds", a.rep.Duration.Seconds())
	if a.rep.Failure != nil {
		// The caller says the failure it returns, once.
		l.WithError(a.rep.Failure).Debug("resolve: failed")
		return res, a.rep.Failure
	}
	l.Debug("resolve: done")
	return res, nil
}

func (a *attempt) openDomain() bool {
	t := time.Now()
	d, err := a.r.Domain(a.ctx)
	if err != nil {
		a.rep.step(StepDomain, "", StepFailed, t, "")
		return a.stop(classifyDomain(a.ctx, err, errors.Is(err, errWaitBudget)))
	}
	a.rep.step(StepDomain, "", StepOK, t, "")
	a.dom = d
	return true
}

// source fingerprints the canonical source once, through the cache.
func (a *attempt) source() (*fingerprint.Result, *Failure) {
	if a.fp != nil || a.fpErr != nil {
		return a.fp, a.fpErr
	}
	t := time.Now()
	res, err := a.r.fingerprints(a.dom).Scan(a.ctx, a.req.Source)
	if err != nil {
		a.rep.step(StepFingerprint, SourceCanonical, StepFailed, t, "")
		a.fpErr = &Failure{Kind: KindSource, Step: StepFingerprint, Source: SourceCanonical, Retry: retryable(err), Err: err}
		if a.ctx.Err() != nil {
			a.fpErr.Kind = KindCanceled
		}
		return nil, a.fpErr
	}
	a.rep.step(StepFingerprint, SourceCanonical, StepOK, t,
		fmt.Sprintf("%d files: %d cached, %d hashed", res.Stats.Files, res.Stats.Hits+res.Stats.Named, len(res.Src.Files)-res.Stats.Hits-res.Stats.Named))
	a.rep.Counters.addFingerprint(res.Stats)
	a.fp = res
	return res, nil
}

// identify settles the exact identity: the request's, or the local producer's from
// the fingerprinted source.
func (a *attempt) identify() bool {
	invalid := func(err error) bool {
		a.fail(&Failure{Kind: KindInvalidRequest, Step: StepIdentity, Err: err})
		return false
	}
	if a.req.Identity == nil && !a.req.ID.IsZero() {
		a.rep.ID = a.req.ID
		return true
	}
	if a.req.Identity != nil {
		a.id = *a.req.Identity
	} else {
		if a.req.Local == nil || a.req.Source == "" {
			return invalid(fmt.Errorf("no identity, and no source directory and local producer to derive one: %w", errdefs.ErrInvalidArgument))
		}
		fp, f := a.source()
		if f != nil {
			return a.stop(f)
		}
		id, err := a.req.Local.Identity(fp.Src, a.req.Target)
		if err != nil {
			if errdefs.IsNotImplemented(err) {
				a.fail(&Failure{Kind: KindUnsupported, Step: StepIdentity, Err: err})
				return false
			}
			return invalid(err)
		}
		a.id = id
	}
	if err := a.id.Validate(); err != nil {
		return invalid(err)
	}
	digest, err := a.id.ID()
	if err != nil {
		return invalid(err)
	}
	a.rep.ID, a.known = digest, true
	return true
}

// lookup tries the validated local artifact.
func (a *attempt) lookup() bool {
	t := time.Now()
	bctx, cancel := context.WithTimeoutCause(a.ctx, a.r.cfg.Wait.Budget(), errWaitBudget)
	lookup := a.dom.Lookup
	if a.req.Hold {
		lookup = a.dom.Hold
	}
	l, err := lookup(bctx, a.rep.ID, a.r.cfg.Validation)
	spent := errors.Is(context.Cause(bctx), errWaitBudget)
	cancel()
	if err != nil {
		f := classifyLookup(a.ctx, StepLookup, SourceLocal, err, spent)
		outcome := StepFailed
		if f.Kind == KindMiss {
			outcome = StepMiss
		}
		a.rep.step(StepLookup, SourceLocal, outcome, t, f.reason())
		return a.recover(f)
	}
	if f := a.collision(StepLookup, SourceLocal, l); f != nil {
		a.rep.step(StepLookup, SourceLocal, StepFailed, t, f.reason())
		return a.recover(f)
	}
	if f := a.trustedHit(StepLookup, SourceLocal, l); f != nil {
		// Not served as it is: the registry verifies it again (the
		// artifact stays; its bytes are not fetched twice). When no
		// source verifies it, resolution ends with this refusal, never
		// on the canonical source.
		l.Close()
		a.rep.step(StepLookup, SourceLocal, StepFailed, t, f.reason())
		a.last, a.rep.Recovered = f, append(a.rep.Recovered, f)
		return false
	}
	a.rep.step(StepLookup, SourceLocal, StepHit, t, "")
	a.win(OutcomeHit, SourceLocal, l)
	return true
}

// providers are the remote providers of this request: the weight peers,
// the located provider of its Artifact reference, then the configured
// ones. false when resolution is over (the reference may not be used).
func (a *attempt) providers() ([]Provider, bool) {
	ps := slices.Clone(a.r.cfg.Peers)
	if a.req.Artifact != "" && a.r.cfg.Locate != nil {
		t := time.Now()
		p, err := a.r.cfg.Locate(a.ctx, a.req.Artifact)
		if err != nil {
			a.rep.step(StepRemote, "", StepFailed, t, string(KindPolicy))
			return nil, !a.recover(&Failure{Kind: KindPolicy, Step: StepRemote, Err: err})
		}
		ps = append(ps, p)
	}
	return append(ps, a.r.cfg.Providers...), true
}

// remote tries one provider: a clean miss, or its artifact materialised locally.
func (a *attempt) remote(p Provider) bool {
	t := time.Now()
	name := p.Name()
	dp, isDigest := p.(IDProvider)
	if !a.known && !isDigest {
		a.rep.step(StepRemote, name, StepSkipped, t, "needs the full identity, the request has only its digest")
		return false
	}
	plan := func() (artifact.Producer, *Failure) {
		var prod artifact.Producer
		var err error
		if a.known {
			prod, err = p.Producer(a.ctx, a.id)
		} else {
			var id artifact.Identity
			if id, prod, err = dp.ProducerForID(a.ctx, a.rep.ID); err == nil {
				if f := a.learn(StepRemote, name, id); f != nil {
					return nil, f
				}
			}
		}
		if err == nil && prod == nil {
			err = fmt.Errorf("provider %s returned no producer: %w", name, errdefs.ErrNotFound)
		}
		if err != nil {
			f := classifyProducerError(StepRemote, name, err, true)
			if a.ctx.Err() != nil {
				f.Kind = KindCanceled
			}
			return nil, f
		}
		return prod, nil
	}
	return a.materialise(StepRemote, name, plan, true, OutcomeFetched, t)
}

// materialise plans a producer and runs it through the store, and records
// the result.
func (a *attempt) materialise(step, source string, plan func() (artifact.Producer, *Failure), remote bool, outcome Outcome, t time.Time) bool {
	moved := a.rep.BytesMoved
	br, f := a.getOrBuild(step, source, plan, remote)
	if f == nil {
		f = a.collision(step, source, br.lease)
	}
	if f == nil && !remote && br.built {
		f = a.sourceChanged(step, source, br.lease)
	}
	if f != nil {
		s := a.rep.step(step, source, missOrFailed(f), t, f.reason())
		s.Bytes = a.rep.BytesMoved - moved
		return a.recover(f)
	}
	s := a.rep.step(step, source, StepOK, t, "")
	s.Bytes, s.Transfer = a.rep.BytesMoved-moved, br.transfer
	if !br.built { // another process published it meanwhile
		outcome, source = OutcomeHit, SourceLocal
		s.Detail = "published by another process while waiting"
	}
	a.win(outcome, source, br.lease)
	return true
}

// sourceChanged fails a local build whose source changed after it was
// fingerprinted: its artifact would not match its identity, so it is removed.
func (a *attempt) sourceChanged(step, source string, l *store.Lease) *Failure {
	if a.fp == nil {
		return nil
	}
	changed := a.fp.Changed()
	if len(changed) == 0 {
		return nil
	}
	l.Close()
	if err := a.dom.Remove(a.ctx, a.rep.ID); err != nil {
		log.G(a.ctx).WithError(err).Warn("resolve: could not remove an artifact built from a changing source")
	}
	return &Failure{Kind: KindProducer, Step: step, Source: source,
		Err: &artifact.SourceMismatchError{Path: changed[0], Want: "unchanged since fingerprinted", Got: "changed while the artifact was built"}}
}

func missOrFailed(f *Failure) string {
	if f.Kind == KindMiss {
		return StepMiss
	}
	return StepFailed
}

// local tries the registered local producers that make exactly this identity.
func (a *attempt) local() bool {
	t := time.Now()
	candidates := a.r.cfg.Producers
	if a.req.Local != nil {
		candidates = append([]producers.Local{a.req.Local}, candidates...)
	}
	var eligible []producers.Local
	for _, rc := range candidates {
		if rc.Name() == a.id.Producer.Name {
			eligible = append(eligible, rc)
		}
	}
	switch {
	case len(eligible) == 0:
		return false
	case !a.r.cfg.AllowLocalBuild:
		a.rep.step(StepProduce, "", StepSkipped, t, "allow_local_build is off")
		return false
	case a.req.Source == "":
		a.rep.step(StepProduce, "", StepSkipped, t, "no source directory for local producers")
		return false
	}
	st := a.signedSource()
	why := a.unsigned()
	if why != "" && st == nil {
		a.rep.step(StepProduce, "", StepSkipped, t, why)
		return false
	}
	// The model the identity names, whether given or derived.
	target := producers.Target{Repository: a.id.Model.Repository, Revision: a.id.Model.Revision, Component: a.id.Component}
	for _, rc := range eligible {
		t := time.Now()
		source := SourceProducerPrefix + rc.Name()
		if rc.Phase() != producers.PreLoadSafe {
			a.rep.step(StepProduce, source, StepSkipped, t, string(rc.Phase())+" producers run only after a load")
			continue
		}
		fp, f := a.source()
		if f != nil {
			return a.recover(f)
		}
		id, err := rc.Identity(fp.Src, target)
		if err != nil {
			a.rep.step(StepProduce, source, StepSkipped, t, err.Error())
			continue
		}
		if d, _ := id.ID(); d != a.rep.ID {
			a.rep.step(StepProduce, source, StepSkipped, t, "makes another identity from this source")
			continue
		}
		if skip, f := a.localSignature(st, rc.Name(), source, why, fp.Src); f != nil {
			a.rep.step(StepProduce, source, StepFailed, t, f.reason())
			return a.recover(f)
		} else if skip != "" {
			a.rep.step(StepProduce, source, StepSkipped, t, skip)
			continue
		}
		prod, err := rc.Producer(fp.Src)
		if err != nil {
			f := classifyProducerError(StepProduce, source, err, false)
			a.rep.step(StepProduce, source, StepFailed, t, f.reason())
			return a.recover(f)
		}
		made := func() (artifact.Producer, *Failure) { return prod, nil }
		if a.materialise(StepProduce, source, made, false, OutcomeBuilt, t) || a.done {
			return true
		}
	}
	return false
}
