// Package exitcode owns the exit status of weightsnap and weightsnapd: one
// mapping from an error's class to a status.
package exitcode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/weightsnap/weightsnap/internal/netfail"
)

// Exit statuses.
const (
	Other       = 1 // anything not classified below
	BadInput    = 2 // errdefs.ErrInvalidArgument
	NotFound    = 3 // errdefs.ErrNotFound
	InvalidData = 4 // errdefs.ErrDataLoss
	Busy        = 5 // busy (failed precondition), out of space, unavailable, unreachable or timed out
	Refused     = 6 // refused by the trust policy (a trust.Refusal)
)

// policyRefusal is a refusal by the trust policy (trust.Refusal), known
// by its method so that this package imports no trust package.
type policyRefusal interface{ TrustScope() string }

// Of is the exit status for err, which must not be nil: 6 refused by the
// trust policy, 2 bad input, 3 not found, 4 invalid data, 5 busy, out of
// space, unavailable, a network endpoint that does not answer or timed
// out, 1 other.
func Of(err error) int {
	var refusal policyRefusal
	switch {
	case errors.As(err, &refusal):
		return Refused
	case errdefs.IsInvalidArgument(err):
		return BadInput
	case errdefs.IsNotFound(err):
		return NotFound
	case errdefs.IsDataLoss(err):
		return InvalidData
	case errdefs.IsFailedPrecondition(err), errdefs.IsResourceExhausted(err), errdefs.IsUnavailable(err),
		errdefs.IsDeadlineExceeded(err), unanswered(err):
		return Busy
	}
	return Other
}

// unanswered says err is a network operation whose endpoint could not be
// reached or did not answer (a weight peer that is down, a name that does
// not resolve), however the package that met it wrapped it.
func unanswered(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return (errors.As(err, &op) || errors.As(err, &dns)) && netfail.Unreachable(err)
}

// Execute runs root. What cobra refuses before a command starts (an
// unknown command or flag, a wrong number of arguments, a required flag
// not set) is bad input, as every other malformed request is.
func Execute(ctx context.Context, root *cobra.Command) error {
	started := false
	var mark func(c *cobra.Command)
	mark = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				started = true
				return run(cmd, args)
			}
		} else if run := c.Run; run != nil {
			c.Run = func(cmd *cobra.Command, args []string) {
				started = true
				run(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			mark(sub)
		}
	}
	mark(root)
	err := root.ExecuteContext(ctx)
	if err != nil && !started && Of(err) == Other {
		return fmt.Errorf("%w (see --help): %w", err, errdefs.ErrInvalidArgument)
	}
	return err
}

// Signalled is the exit status of a command stopped by a signal, as a
// shell reports one: 128 plus its number (130 for SIGINT, 143 for SIGTERM).
func Signalled(sig syscall.Signal) int { return 128 + int(sig) }
