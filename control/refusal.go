package control

import (
	"errors"

	"github.com/containerd/errdefs"
)

// failure is the body of a request that failed: the daemon's message and,
// for a refusal by its trust policy, the scope that refused.
type failure struct {
	Error     string `json:"error"`
	RefusedBy string `json:"refused_by,omitempty"`
}

// policyRefusal is a refusal by the trust policy (package trust's
// Refusal), known by its method so that this package imports no trust
// package.
type policyRefusal interface{ TrustScope() string }

// failed is the body that answers err.
func failed(err error) failure {
	f := failure{Error: err.Error()}
	var r policyRefusal
	if errors.As(err, &r) {
		f.RefusedBy = r.TrustScope()
	}
	return f
}

// Refusal is a request the daemon's trust policy refused: the scope that
// refused and the daemon's message. The CLI exits with the trust policy's
// status for it, as for a refusal of its own.
type Refusal struct {
	Scope   string
	Message string
}

func (r *Refusal) Error() string { return "weightsnapd: " + r.Message }

// TrustScope is the scope that refused.
func (r *Refusal) TrustScope() string { return r.Scope }

// Unwrap classifies a refusal as permission denied.
func (r *Refusal) Unwrap() error { return errdefs.ErrPermissionDenied }
