// Package exitcode owns the exit status of weightsnap and weightsnapd: one
// mapping from an error's class to a status.
package exitcode

import "github.com/containerd/errdefs"

// Exit statuses.
const (
	Other       = 1 // anything not classified below
	BadInput    = 2 // errdefs.ErrInvalidArgument
	NotFound    = 3 // errdefs.ErrNotFound
	InvalidData = 4 // errdefs.ErrDataLoss
	Busy        = 5 // busy (failed precondition), out of space, unavailable or timed out
)

// Of is the exit status for err, which must not be nil: 2 bad input, 3 not
// found, 4 invalid data, 5 busy, out of space or timed out, 1 other.
func Of(err error) int {
	switch {
	case errdefs.IsInvalidArgument(err):
		return BadInput
	case errdefs.IsNotFound(err):
		return NotFound
	case errdefs.IsDataLoss(err):
		return InvalidData
	case errdefs.IsFailedPrecondition(err), errdefs.IsResourceExhausted(err), errdefs.IsUnavailable(err),
		errdefs.IsDeadlineExceeded(err):
		return Busy
	}
	return Other
}
