package peer

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// StaleGenerationError is a peer that is not the process a session was
// opened with: it restarted, so nothing of the old session (rail secrets,
// remote keys) is valid.
type StaleGenerationError struct {
	Addr      string
	Want, Got string
}

func (e *StaleGenerationError) Error() string {
	return fmt.Sprintf("peer %s restarted: session generation %s, peer now %s", e.Addr, artifact.ShortHex(e.Want), artifact.ShortHex(e.Got))
}

// Unwrap classifies the error: the session is gone, a new one may work.
func (e *StaleGenerationError) Unwrap() error { return errdefs.ErrUnavailable }

// Error is a failure talking to one peer.
type Error struct {
	Addr string
	Err  error
}

func (e *Error) Error() string { return "peer " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func badInput(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// unsupported says a data plane is not built in.
func unsupported(m Mode, why string) error {
	return fmt.Errorf("data plane %s: %s: %w", m, why, errdefs.ErrNotImplemented)
}

// peerFault says whether err came from the peer or the wire, rather than
// from this node (its store, its context): such a failure moves a fetch on
// to another peer.
func peerFault(err error) bool {
	var pe *Error
	return errors.As(err, &pe)
}
