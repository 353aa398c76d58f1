package resolve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/store"
)

// Kind is the type of a resolution failure: a row of the failure-to-action table.
type Kind string

// Failure kinds.
const (
	// KindMiss is a clean miss: the source does not have the identity.
	KindMiss Kind = "miss"
	// KindInvalidCache is a local artifact that failed validation or is denied.
	KindInvalidCache Kind = "invalid_cache"
	// KindCoordinationTimeout is a lookup or build lock wait that ran past
	// the WaitPolicy; retryable.
	KindCoordinationTimeout Kind = "coordination_timeout"
	// KindDomain is a store domain that could not be opened or used; a
	// domain-init lock timeout is retryable, anything else is not.
	KindDomain Kind = "domain"
	// KindSource is a canonical source directory that could not be
	// fingerprinted; retryable when it was changing while read.
	KindSource Kind = "source"
	// KindRemote is a remote provider's failure; retryable when the
	// provider says so (a Retryable() bool method, or errdefs.ErrUnavailable).
	KindRemote Kind = "remote"
	// KindUnreachable is a remote source that could not be reached or did
	// not answer: down, refusing, timing out, busy, a 5xx (classifyRemote).
	// Retryable: resolution goes on to the next source.
	KindUnreachable Kind = "unreachable"
	// KindIntegrity is a remote source that served bytes that failed
	// verification; nothing of them was published. Resolution goes on to
	// the next source, but never ends on the canonical source after it.
	KindIntegrity Kind = "integrity"
	// KindUnsigned is a remote source (a weight peer) that brought no
	// signature the trust policy accepts for the request's reference, or
	// one that does not bind to the artifact it sends; nothing of it was
	// published. Resolution goes on to the next source, but never ends on
	// the canonical source after it.
	KindUnsigned Kind = "unsigned"
	// KindAuth is a remote source that refused this node's credentials, or
	// whose TLS identity this node refused. Always visible.
	KindAuth Kind = "auth"
	// KindCapacity is a build refused or stopped for lack of space.
	KindCapacity Kind = "capacity"
	// KindUnsupported is an unsupported capability (dtype pair, layout
	// rule, restorer schema, filesystem). Always visible.
	KindUnsupported Kind = "unsupported"
	// KindIdentityCollision is an artifact whose identity is not the one
	// asked for under the same digest or name. Always visible.
	KindIdentityCollision Kind = "identity_collision"
	// KindProducer is a producer that failed. Always visible.
	KindProducer Kind = "producer"
	// KindPublication is a producer that succeeded but whose output could
	// not be published. Always visible.
	KindPublication Kind = "publication"
	// KindRestorePlan is a restorer that refused the artifact for the model.
	KindRestorePlan Kind = "restore_plan"
	// KindRestoreCommit is a restore that failed part way; the model is
	// partially hydrated and discarded. Retryable: a fallback on a fresh
	// model may succeed.
	KindRestoreCommit Kind = "restore_commit"
	// KindModel is a model that could not be made, or a canonical load that failed.
	KindModel Kind = "model"
	// KindInvalidRequest is a request that cannot be resolved as asked.
	KindInvalidRequest Kind = "invalid_request"
	// KindPolicy is an operation the configuration does not allow.
	KindPolicy Kind = "policy"
	// KindCanceled is a resolution whose caller cancelled it.
	KindCanceled Kind = "canceled"
)

// Failure is a typed resolution failure.
type Failure struct {
	Kind   Kind
	Step   string // the step that failed
	Source string // the source tried, if any
	Retry  bool   // whether the failure may go away on its own
	Err    error
}

func (f *Failure) Error() string {
	s := "resolve: " + f.Step
	if f.Source != "" {
		s += " (" + f.Source + ")"
	}
	s += ": " + string(f.Kind)
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}

// reason is the failure in a report step: its kind and its message, on one
// line.
func (f *Failure) reason() string {
	if f.Err == nil {
		return string(f.Kind)
	}
	return string(f.Kind) + ": " + strings.ReplaceAll(f.Err.Error(), "\n", "; ")
}

// Retryable reports whether the failure may go away on its own.
func (f *Failure) Retryable() bool { return f.Retry }

// Unwrap returns the failure's errdefs class and its cause.
func (f *Failure) Unwrap() []error {
	var out []error
	if c := kindClass(f.Kind, f.Retry); c != nil {
		out = append(out, c)
	}
	if f.Err != nil {
		out = append(out, f.Err)
	}
	return out
}

// MarshalJSON is the failure in a report.
func (f *Failure) MarshalJSON() ([]byte, error) {
	msg := ""
	if f.Err != nil {
		msg = f.Err.Error()
	}
	return json.Marshal(struct {
		Kind      Kind   `json:"kind"`
		Step      string `json:"step"`
		Source    string `json:"source,omitempty"`
		Retryable bool   `json:"retryable"`
		Message   string `json:"message,omitempty"`
	}{f.Kind, f.Step, f.Source, f.Retry, msg})
}

func kindClass(k Kind, retry bool) error {
	switch k {
	case KindMiss:
		return errdefs.ErrNotFound
	case KindInvalidCache, KindIntegrity:
		return errdefs.ErrDataLoss
	case KindUnsigned:
		return errdefs.ErrPermissionDenied
	case KindUnreachable:
		return errdefs.ErrUnavailable
	case KindCoordinationTimeout:
		return errdefs.ErrUnavailable
	case KindCapacity:
		return errdefs.ErrResourceExhausted
	case KindUnsupported:
		return errdefs.ErrNotImplemented
	case KindIdentityCollision:
		return errdefs.ErrConflict
	case KindInvalidRequest:
		return errdefs.ErrInvalidArgument
	case KindPolicy:
		return errdefs.ErrPermissionDenied
	case KindRestoreCommit:
		return errdefs.ErrAborted
	}
	if retry {
		return errdefs.ErrUnavailable
	}
	return nil
}

// Action is what resolution does after a failure.
type Action string

// Actions.
const (
	// ActionCanonical serves the canonical source: no artifact.
	ActionCanonical Action = "canonical"
	// ActionNext tries the next source in order; when none is left, the
	// rule's End action applies.
	ActionNext Action = "next"
	// ActionFail ends resolution with the failure, visible to the caller.
	ActionFail Action = "fail"
)

// Rule is the action for one failure in one mode.
type Rule struct {
	Step Action `json:"step"` // right after the failure
	End  Action `json:"end"`  // when no source is left after it
}

// row is one row of the failure-to-action table.
type row struct {
	name      string
	match     func(*Failure) bool
	preferred Rule
	required  Rule
}

var (
	nextThenCanonical = Rule{Step: ActionNext, End: ActionCanonical}
	nextThenFail      = Rule{Step: ActionNext, End: ActionFail}
	fail              = Rule{Step: ActionFail, End: ActionFail}
	canonicalDirect   = Rule{Step: ActionCanonical, End: ActionCanonical}
)

func kinds(ks ...Kind) func(*Failure) bool {
	return func(f *Failure) bool {
		for _, k := range ks {
			if f.Kind == k {
				return true
			}
		}
		return false
	}
}

// table is the one failure-to-action table; the first matching row
// applies. In disabled mode no source is tried: every row is canonical-direct.
var table = [...]row{
	{"clean miss", kinds(KindMiss), nextThenCanonical, nextThenFail},
	{"invalid cache entry", kinds(KindInvalidCache), nextThenCanonical, nextThenFail},
	{"source unreachable", kinds(KindUnreachable), nextThenCanonical, nextThenFail},
	{"source served bad bytes", kinds(KindIntegrity), nextThenFail, nextThenFail},
	{"source without an accepted signature", kinds(KindUnsigned), nextThenFail, nextThenFail},
	{"always visible", kinds(KindUnsupported, KindIdentityCollision, KindProducer, KindPublication,
		KindInvalidRequest, KindPolicy, KindCanceled, KindModel, KindAuth), fail, fail},
	{"typed failure, retryable", func(f *Failure) bool { return f.Retry }, nextThenCanonical, nextThenFail},
	{"typed failure, not retryable", func(*Failure) bool { return true }, fail, fail},
}

// Decide returns the action for a failure in a mode: the failure-to-action
// table. A clean miss, an invalid cache entry or an unreachable source
// moves on to the next source and, when none is left, falls back to the
// canonical source in preferred mode; a typed failure does so only when it
// is retryable; a source that served bad bytes moves on too, but when no
// source is left the resolution fails in either mode (the End of every
// failure passed over applies, the strictest winning); unsupported
// capability, identity collision, authentication, producer and
// publication failures stay visible. Required mode never falls back;
// disabled mode never tries. classifyRemote says which remote failure is
// which.
func Decide(mode Mode, f *Failure) Rule {
	if mode == Disabled {
		return canonicalDirect
	}
	for _, r := range table {
		if r.match(f) {
			if mode == Required {
				return r.required
			}
			return r.preferred
		}
	}
	return fail
}

// TableRow names the table row a failure falls in (for reports and tests).
func TableRow(f *Failure) string {
	for _, r := range table {
		if r.match(f) {
			return r.name
		}
	}
	return ""
}

// errWaitBudget is the cause of a context stopped by the WaitPolicy.
var errWaitBudget = errors.New("coordination wait budget spent")

// retryable reports whether err says it may go away on its own: a
// Retryable() bool method anywhere in its chain, or errdefs.ErrUnavailable.
func retryable(err error) bool {
	var r interface{ Retryable() bool }
	if errors.As(err, &r) {
		return r.Retryable()
	}
	return errdefs.IsUnavailable(err)
}

func isTimeout(err error) bool {
	var te *store.TimeoutError
	return errors.As(err, &te) || errors.Is(err, errWaitBudget)
}

// classifyDomain types a store.Open failure.
func classifyDomain(ctx context.Context, err error, budgetSpent bool) *Failure {
	f := &Failure{Kind: KindDomain, Step: StepDomain, Err: err}
	var ue *store.UnsupportedFSError
	switch {
	case ctx.Err() != nil:
		f.Kind = KindCanceled
	case budgetSpent || isTimeout(err):
		f.Retry = true
		f.Err = fmt.Errorf("domain-init lock: %w", err)
	case errors.As(err, &ue):
		f.Kind = KindUnsupported
	}
	return f
}

// classifyLookup types a store.Lookup failure.
func classifyLookup(ctx context.Context, step, source string, err error, budgetSpent bool) *Failure {
	f := &Failure{Kind: KindDomain, Step: step, Source: source, Err: err}
	var de *store.DeniedError
	switch {
	case ctx.Err() != nil:
		f.Kind = KindCanceled
	case budgetSpent || isTimeout(err):
		f.Kind, f.Retry = KindCoordinationTimeout, true
	case errors.As(err, &de) || store.IsInvalid(err):
		f.Kind = KindInvalidCache
	case errors.Is(err, store.ErrMiss):
		f.Kind = KindMiss
	default:
		f.Retry = retryable(err)
	}
	return f
}

// classifyProducerError types an error a producer returned. A remote
// provider's is classed by classifyRemote; a local producer's failure is
// visible unless it names an unsupported capability.
func classifyProducerError(step, source string, err error, remote bool) *Failure {
	f := &Failure{Kind: KindProducer, Step: step, Source: source, Err: err}
	var ce *store.CapacityError
	switch {
	case remote:
		classifyRemote(f, err)
	case errors.As(err, &ce):
		f.Kind = KindCapacity
	case errdefs.IsNotImplemented(err):
		f.Kind = KindUnsupported
	}
	return f
}
