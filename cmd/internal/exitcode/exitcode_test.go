package exitcode

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errors.New("plain"), Other},
		{errdefs.ErrInternal, Other},
		{context.Canceled, Other},
		{fmt.Errorf("--rate: %w", errdefs.ErrInvalidArgument), BadInput},
		{fmt.Errorf("artifact not in store: %w", errdefs.ErrNotFound), NotFound},
		{fmt.Errorf("artifact is invalid: %w", errdefs.ErrDataLoss), InvalidData},
		{fmt.Errorf("artifact is leased: %w", errdefs.ErrFailedPrecondition), Busy},
		{fmt.Errorf("store is out of space: %w", errdefs.ErrResourceExhausted), Busy},
		{fmt.Errorf("timed out waiting for a lock: %w", errdefs.ErrUnavailable), Busy},
		{fmt.Errorf("scrub: %w", context.DeadlineExceeded), Busy},
		// The first class in the table wins when an error carries two.
		{errors.Join(errdefs.ErrNotFound, errdefs.ErrInvalidArgument), BadInput},
		{errors.Join(errdefs.ErrUnavailable, errdefs.ErrDataLoss), InvalidData},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
