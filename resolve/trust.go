package resolve

import (
	"context"
	"errors"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// Trust is the node's trust policy as resolution applies it (package
// oci's Gate adapts package trust's). The registry providers check the
// policy themselves, from the manifest, before any payload byte; their
// refusal is a policy failure. Trust decides the rest: whether an
// artifact the store holds may serve a request (its recorded
// verification meets the policy now), whether what a remote source
// carries (a registry's verification, a weight peer's signature records)
// meets the policy before anything of it is published, keeping how, and
// whether a local producer, which carries no signature, may build it.
// Each ref is the request's Artifact reference, "" when it names none.
type Trust interface {
	// Hit is nil when the store's artifact id may serve a request
	// naming ref; else a refusal, and resolution goes on to the remote
	// sources, which verify it again.
	Hit(ctx context.Context, d *store.Domain, id artifact.ID, ref string) error
	// Admit is nil when what prod, a remote source's producer, carries
	// meets the policy for ref, and keeps how, before prod runs; else a
	// refusal (the source is passed over: KindUnsigned) or the error
	// that kept it from recording.
	Admit(ctx context.Context, d *store.Domain, id artifact.ID, ref string, prod artifact.Producer) error
	// Unsigned is nil when a local producer, which carries no
	// signature, may build the artifact of a request naming ref; else
	// the refusal that skips it.
	Unsigned(ref string) error
}

// Trusted is nil when the trust policy, as it stands, lets the store's
// artifact id serve a request naming ref: Trust's Hit, from the recorded
// verification, no payload byte read. Otherwise it is the refusal, which
// names the scope. A runtime without a trust policy trusts every artifact.
// The snapshotter asks it at each mount of an existing weight snapshot.
func (r *Runtime) Trusted(ctx context.Context, id artifact.ID, ref string) error {
	if r.cfg.Trust == nil {
		return nil
	}
	d, err := r.Domain(ctx)
	if err != nil {
		return err
	}
	return r.cfg.Trust.Hit(ctx, d, id, ref)
}

// SourceSignatures is a Trust that also checks a signature of a local
// passthrough build's source files, such as a staged hub snapshot's
// model.sig (oci.Gate). A source that carries one is built by the
// passthrough producer where the policy wants a signature, once
// CheckSource accepts it; a source that carries none is not.
type SourceSignatures interface {
	// SignedSource says whether the source directory dir carries a
	// signature of its files.
	SignedSource(dir string) bool
	// CheckSource checks it against src's digests (each sha256, which
	// the copy verifies) under what the policy requires of a request
	// naming ref, and keeps how, before the producer of the artifact id
	// runs: nil, a refusal, or the error that kept it from recording.
	CheckSource(ctx context.Context, d *store.Domain, id artifact.ID, ref string, src *artifact.SourceDir) error
}

// signedSource is the Trust's SourceSignatures when the request's
// source carries a signature of its files, else nil.
func (a *attempt) signedSource() SourceSignatures {
	if st, ok := a.r.cfg.Trust.(SourceSignatures); ok && st.SignedSource(a.req.Source) {
		return st
	}
	return nil
}

// localSignature applies a source's signature (st, nil none) to the
// local producer named producer, before it runs: a passthrough build's
// source is checked (CheckSource; a refusal is a policy failure), and
// another producer, whose artifact the signature does not cover, is
// skipped saying why where the policy wants a signature (why, "" not).
func (a *attempt) localSignature(st SourceSignatures, producer, source, why string, src *artifact.SourceDir) (string, *Failure) {
	switch {
	case st == nil:
		return "", nil
	case producer != artifact.PassthroughName:
		if why != "" {
			return why + " (the model.sig covers the source's files, not what this producer makes)", nil
		}
		return "", nil
	}
	err := st.CheckSource(a.ctx, a.dom, a.rep.ID, a.req.Artifact, src)
	switch {
	case err == nil:
		return "", nil
	case isPolicyRefusal(err):
		return "", &Failure{Kind: KindPolicy, Step: StepProduce, Source: source, Err: err}
	}
	return "", &Failure{Kind: KindProducer, Step: StepProduce, Source: source, Err: err}
}

// policyRefusal is a trust policy's refusal (package trust's Refusal):
// a policy failure, always visible, in every mode.
type policyRefusal interface{ TrustScope() string }

func isPolicyRefusal(err error) bool {
	var r policyRefusal
	return errors.As(err, &r)
}

// trustedHit applies Trust to a store hit: nil, or the failure that
// turns it down.
func (a *attempt) trustedHit(step, source string, l *store.Lease) *Failure {
	if a.r.cfg.Trust == nil {
		return nil
	}
	if err := a.r.cfg.Trust.Hit(a.ctx, a.dom, l.ID, a.req.Artifact); err != nil {
		return &Failure{Kind: KindPolicy, Step: step, Source: source, Err: err}
	}
	return nil
}

// admit applies Trust to a remote source's producer before it runs.
func (a *attempt) admit(step, source string, prod artifact.Producer) *Failure {
	if a.r.cfg.Trust == nil {
		return nil
	}
	err := a.r.cfg.Trust.Admit(a.ctx, a.dom, a.rep.ID, a.req.Artifact, prod)
	switch {
	case err == nil:
		return nil
	case isPolicyRefusal(err):
		return &Failure{Kind: KindUnsigned, Step: step, Source: source, Err: err}
	}
	return &Failure{Kind: KindPublication, Step: step, Source: source, Err: err}
}

// unsigned says why a local producer, which carries no signature, may not
// be used for this request ("" when it may).
func (a *attempt) unsigned() string {
	if a.r.cfg.Trust == nil {
		return ""
	}
	if err := a.r.cfg.Trust.Unsigned(a.req.Artifact); err != nil {
		return err.Error()
	}
	return ""
}
