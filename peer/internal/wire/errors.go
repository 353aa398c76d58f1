package wire

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// Errorf is a message that breaks the wire format (truncated, malformed,
// or out of its bounds) about what: bad input.
func Errorf(what, format string, args ...any) error {
	return fmt.Errorf("peer protocol: %s: %s: %w", what, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// tooLarge is a length on the wire over its limit; nothing was allocated
// for it.
func tooLarge(what string, n, limit uint64) error {
	return Errorf(what, "length %d is over the limit of %d", n, limit)
}

// RemoteError is a refusal or failure the peer answered with.
type RemoteError struct {
	Code    byte
	Message string
}

func (e *RemoteError) Error() string { return "peer: " + e.Message }

// Unwrap classifies the error by its status code.
func (e *RemoteError) Unwrap() error {
	switch e.Code {
	case StatusBadRequest:
		return errdefs.ErrInvalidArgument
	case StatusUnauthorized:
		return errdefs.ErrPermissionDenied
	case StatusNotFound:
		return errdefs.ErrNotFound
	case StatusBusy:
		return errdefs.ErrUnavailable
	case StatusUnsupported:
		return errdefs.ErrNotImplemented
	case StatusStale:
		return errdefs.ErrFailedPrecondition
	case StatusTooLarge:
		return errdefs.ErrResourceExhausted
	}
	return errdefs.ErrInternal
}

// Retryable says whether asking again (this peer later, or another) may work.
func (e *RemoteError) Retryable() bool { return e.Code == StatusBusy || e.Code == StatusInternal }
