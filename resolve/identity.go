package resolve

import (
	"bytes"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// learn settles the identity of a digest-only request from an artifact
// that claims it: a collision unless its digest is the one asked for.
func (a *attempt) learn(step, source string, id artifact.Identity) *Failure {
	if d, err := id.ID(); err != nil || d != a.rep.ID {
		return &Failure{Kind: KindIdentityCollision, Step: step, Source: source,
			Err: fmt.Errorf("%s holds identity %s, not %s: %w", source, d, a.rep.ID, errdefs.ErrConflict)}
	}
	a.id, a.known = id, true
	return nil
}

// collision checks a lease carries exactly the identity asked for.
func (a *attempt) collision(step, source string, l *store.Lease) *Failure {
	if !a.known {
		// The store checked that the lease's identity digests to its ID
		// (every lookup does): no need to digest it again.
		if l.ID != a.rep.ID {
			l.Close()
			return &Failure{Kind: KindIdentityCollision, Step: step, Source: source,
				Err: fmt.Errorf("%s holds identity %s, not %s: %w", source, l.ID, a.rep.ID, errdefs.ErrConflict)}
		}
		a.id, a.known = l.Identity(), true
		return nil
	}
	want, err1 := a.id.CanonicalJSON()
	got, err2 := l.Identity().CanonicalJSON()
	if err1 == nil && err2 == nil && bytes.Equal(want, got) {
		return nil
	}
	l.Close()
	return &Failure{Kind: KindIdentityCollision, Step: step, Source: source,
		Err: fmt.Errorf("artifact %s holds another identity than the one asked for: %w", a.rep.ID.Short(), errdefs.ErrConflict)}
}
