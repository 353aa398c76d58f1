package peer

import (
	"errors"
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

func protoErr(what, format string, args ...any) error {
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
	case stBadRequest:
		return errdefs.ErrInvalidArgument
	case stUnauthorized:
		return errdefs.ErrPermissionDenied
	case stNotFound:
		return errdefs.ErrNotFound
	case stBusy:
		return errdefs.ErrUnavailable
	case stUnsupported:
		return errdefs.ErrNotImplemented
	case stStale:
		return errdefs.ErrFailedPrecondition
	case stTooLarge:
		return errdefs.ErrResourceExhausted
	}
	return errdefs.ErrInternal
}

// Retryable says whether asking again (this peer later, or another) may work.
func (e *RemoteError) Retryable() bool { return e.Code == stBusy || e.Code == stInternal }

// StaleGenerationError is a peer that is not the process a session was
// opened with: it restarted, so nothing of the old session (rail secrets,
// remote keys) is valid.
type StaleGenerationError struct {
	Addr      string
	Want, Got string
}

func (e *StaleGenerationError) Error() string {
	return fmt.Sprintf("peer %s restarted: session generation %s, peer now %s", e.Addr, short(e.Want), short(e.Got))
}

// Unwrap classifies the error: the session is gone, a new one may work.
func (e *StaleGenerationError) Unwrap() error { return errdefs.ErrUnavailable }

// PeerError is a failure talking to one peer.
type PeerError struct {
	Addr string
	Err  error
}

func (e *PeerError) Error() string { return "peer " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *PeerError) Unwrap() error { return e.Err }

// MismatchError is fetched bytes that do not hash to the peer's manifest:
// the peer or the wire corrupted them.
type MismatchError struct {
	Path, Tensor string
	Want, Got    string
}

func (e *MismatchError) Error() string {
	s := "fetched " + e.Path
	if e.Tensor != "" {
		s += " tensor " + e.Tensor
	}
	return fmt.Sprintf("%s: BLAKE3 %s, manifest says %s", s, short(e.Got), short(e.Want))
}

// Unwrap classifies the error.
func (e *MismatchError) Unwrap() error { return errdefs.ErrDataLoss }

func badInput(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// unsupported says a data plane is not built in.
func unsupported(m Mode, why string) error {
	return fmt.Errorf("data plane %s: %s: %w", m, why, errdefs.ErrNotImplemented)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// peerFault says whether err came from the peer or the wire, rather than
// from this node (its store, its context): such a failure moves a fetch on
// to another peer.
func peerFault(err error) bool {
	var pe *PeerError
	return errors.As(err, &pe)
}

// noRMA says why the rma plane is missing from a build.
const noRMA = "this build has no libfabric (build with -tags libfabric)"
