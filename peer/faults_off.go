//go:build !faults

package peer

import (
	"context"
	"net"
	"os"
	"time"
)

// faults is a server's fault injection; without the "faults" build tag
// there is none, and every range is sent as it is stored.
type faults struct{}

func newFaults() faults { return faults{} }

// sender is how a tcp rail sends its next range: always sendRange.
func (*faults) sender(context.Context, string) func(net.Conn, *os.File, int64, int64, time.Duration) error {
	return sendRange
}
