package resolve

import (
	"errors"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/netfail"
	"github.com/weightsnap/weightsnap/store"
)

// A remote source's failure, by class: what a weight peer or a registry
// said (its errdefs class, Provider's contract) or, where a provider
// passed a network error on unclassed, what the network said
// (internal/netfail). The first matching row applies; a provider's error
// that joins several peers' falls in the first row any of them matches,
// so one visible failure is never hidden by another peer's miss.
//
//	row             examples                                         kind                retry  preferred          required
//	capacity        this node's store refuses the size               capacity            no     fail               fail
//	trust policy    the policy refuses the artifact's signatures     policy              no     fail               fail
//	unsupported     a sha512 layer, rma not built in                 unsupported         no     fail               fail
//	authentication  401, 403, a peer refusing the token, a TLS       auth                no     fail               fail
//	                certificate that does not verify, a TLS alert
//	integrity       bytes whose digest or BLAKE3 is not the one      integrity           no     next, end fail     next, end fail
//	                promised (never published), an index that
//	                disagrees with its bytes
//	collision       the artifact names another identity              identity_collision  no     fail               fail
//	unreachable     refused, reset, timed out, black-holed, a DNS    unreachable         yes    next, end canonical next, end fail
//	                failure, a peer busy, 429, 5xx
//	clean miss      404, no peer holds it                            miss                no     next, end canonical next, end fail
//	other           anything else                                    remote              as the error says (Retryable, ErrUnavailable)
//
// Authentication stays visible: the source answered, and it said this
// node may not have the artifact or cannot trust the answer. A user with
// a wrong password or token, or a missing CA, expects to be told so, not
// to see a slow local build or the canonical source stand in for the
// registry, silently, on every start. Integrity goes on to the next
// source, whose bytes are verified on their own (the bad ones were never
// published), but it is logged as a warning, listed in the report, and a
// resolution that no other source then serves fails with it rather than
// falling back to the canonical source: a peer or a registry serving
// corrupt bytes is something to fix, not a miss.
func classifyRemote(f *Failure, err error) {
	var ce *store.CapacityError
	switch {
	case errors.As(err, &ce):
		f.Kind = KindCapacity
	case errdefs.IsNotImplemented(err):
		f.Kind = KindUnsupported
	case isPolicyRefusal(err):
		f.Kind = KindPolicy
	case errdefs.IsUnauthorized(err), errdefs.IsPermissionDenied(err), netfail.TLS(err):
		f.Kind = KindAuth
	case errdefs.IsDataLoss(err):
		f.Kind = KindIntegrity
	case errdefs.IsConflict(err):
		f.Kind = KindIdentityCollision
	case errdefs.IsUnavailable(err), netfail.Unreachable(err):
		f.Kind, f.Retry = KindUnreachable, true
	case errdefs.IsNotFound(err):
		f.Kind = KindMiss
	default:
		f.Kind, f.Retry = KindRemote, retryable(err)
	}
}
