package loader

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

// Leased is what a restorer reads from: a validated, leased artifact.
// *store.Lease implements it.
type Leased interface {
	// Identity is the leased artifact's identity.
	Identity() artifact.Identity
	// Tensor returns a tensor's bytes, mapped read-only, and its index entry.
	Tensor(name string) ([]byte, artifact.TensorEntry, error)
}

// Hydration is how much of an artifact a model holds.
type Hydration string

// Hydration states of a model.
const (
	// HydrationEmpty is a fresh model: nothing restored into it yet.
	HydrationEmpty Hydration = "empty"
	// HydrationComplete is a model whose restore committed.
	HydrationComplete Hydration = "complete"
	// HydrationPartial is a model whose commit failed part way. It must
	// never be used or restored into again; a fallback builds a fresh model.
	HydrationPartial Hydration = "partial"
)

// Hydratable is a model a restorer fills.
type Hydratable interface {
	// Hydration reports the model's state.
	Hydration() Hydration
	// MarkPartial records that a commit into the model failed part way.
	MarkPartial()
}

// Restorer loads a leased artifact into a model (an engine's in-memory
// weights, device buffers, ...). The contract:
//
//   - PlanRestore validates the lease against the model (identity, restorer
//     schema, tensor names, dtypes, shapes) and prepares what it needs
//     without mutating the model. A failed plan leaves the model as it was.
//   - The plan's Commit is the only mutation, and runs at most once: a second
//     call fails with ErrCommitted and does nothing.
//   - A Commit that fails marks the model HydrationPartial. Such a model is
//     never used again: the caller's fallback builds a fresh model.
type Restorer[M Hydratable] interface {
	// Name names the restorer in reports.
	Name() string
	// Schema is the artifact.ProducerRef.RestorerSchema it reads.
	Schema() int
	// PlanRestore validates without mutating and returns the plan.
	PlanRestore(ctx context.Context, lease Leased, model M) (RestorePlan, error)
}

// RestorePlan is a validated restore, ready to commit.
type RestorePlan interface {
	// Commit performs the restore: the only mutation of the model. It runs once.
	Commit(ctx context.Context) error
}

// ErrCommitted is returned by a second Commit of the same plan.
var ErrCommitted = fmt.Errorf("restore plan already committed: %w", errdefs.ErrFailedPrecondition)

// RestoreError is a plan or commit failure of a restorer.
type RestoreError struct {
	Restorer string
	Phase    string // "plan" or "commit"
	Tensor   string // the tensor concerned, if any
	Reason   string
	Err      error // an errdefs class or the underlying error
}

func (e *RestoreError) Error() string {
	s := fmt.Sprintf("restorer %s: %s", e.Restorer, e.Phase)
	if e.Tensor != "" {
		s += ": tensor " + e.Tensor
	}
	return s + ": " + e.Reason
}

// Unwrap returns the class or cause.
func (e *RestoreError) Unwrap() error { return e.Err }

// A store lease is what restorers read.
var _ Leased = (*store.Lease)(nil)
