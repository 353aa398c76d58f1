//go:build faults

package peer

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/log"
)

// faults is a server's fault injection, read once from
// WEIGHTSNAP_PEER_FAULT when the server starts: "corrupt-unit[@N]" flips
// one byte of the N-th range (a unit: a tensor, a header or a file's
// piece) this server sends on the tcp plane (default the first), so the
// fleet harness (test/fleet) can prove a child refuses a builder's wrong
// bytes. Only binaries built with the "faults" build tag have it.
type faults struct {
	corruptAt int64 // the range to corrupt, counting from 1; 0: none
	sent      atomic.Int64
}

func newFaults() faults {
	spec := os.Getenv("WEIGHTSNAP_PEER_FAULT")
	kind, nth, _ := strings.Cut(spec, "@")
	if kind != "corrupt-unit" {
		return faults{}
	}
	at, err := strconv.ParseInt(nth, 10, 64)
	if err != nil || at < 1 {
		at = 1
	}
	return faults{corruptAt: at}
}

// sender is how a tcp rail sends its next range: sendRange, or for the
// range WEIGHTSNAP_PEER_FAULT names, sendCorrupt.
func (fs *faults) sender(ctx context.Context, what string) func(net.Conn, *os.File, int64, int64, time.Duration) error {
	if fs.corruptAt == 0 || fs.sent.Add(1) != fs.corruptAt {
		return sendRange
	}
	log.G(ctx).WithField("range", fs.corruptAt).WithField("file", what).Warn("peer: fault injected: sending this range with one byte flipped (WEIGHTSNAP_PEER_FAULT)")
	return sendCorrupt
}

// sendCorrupt sends n bytes of f from off with the last one flipped.
func sendCorrupt(c net.Conn, f *os.File, off, n int64, timeout time.Duration) error {
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		return fmt.Errorf("read for a corrupt send: %w", err)
	}
	if n > 0 {
		b[n-1] ^= 0x5a
	}
	if err := c.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := c.Write(b)
	return err
}
