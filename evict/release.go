package evict

import (
	"context"
	"errors"

	"github.com/weightsnap/weightsnap/artifact"
)

// Releaser lets go of an artifact's users outside the store before it is evicted.
// weightsnapd's releasers remove unused CRI images and empty unused weight snapshots.
// Their links to the artifact's files then no longer keep its bytes.
// A releaser is called with none of the store's locks held.
// It must leave alone whatever is in use.
type Releaser interface {
	Release(ctx context.Context, id artifact.ID) error
}

// Releasers is a list of releasers called in order.
// Each is called even when one before it failed: it may let go of what that one left.
type Releasers []Releaser

// Release calls each releaser in order and joins their errors.
func (rs Releasers) Release(ctx context.Context, id artifact.ID) error {
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.Release(ctx, id))
	}
	return errors.Join(errs...)
}
