package wire

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// ProtocolError is a message that breaks the wire format: truncated,
// malformed, or out of its bounds.
type ProtocolError struct {
	What   string
	Reason string
}

func (e *ProtocolError) Error() string { return "peer protocol: " + e.What + ": " + e.Reason }

// Unwrap classifies the error as bad input.
func (e *ProtocolError) Unwrap() error { return errdefs.ErrInvalidArgument }

// Errorf is a *ProtocolError about what.
func Errorf(what, format string, args ...any) error {
	return &ProtocolError{What: what, Reason: fmt.Sprintf(format, args...)}
}

// TooLargeError is a length on the wire over its limit; nothing was
// allocated for it.
type TooLargeError struct {
	What  string
	Len   uint64
	Limit uint64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("peer protocol: %s: length %d is over the limit of %d", e.What, e.Len, e.Limit)
}

// Unwrap classifies the error as bad input.
func (e *TooLargeError) Unwrap() error { return errdefs.ErrInvalidArgument }

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
