package peer

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// congestionControl is a socket control function that sets a TCP socket's
// congestion control algorithm (TCP_CONGESTION) to name; nil for "", which
// keeps the host's (net.ipv4.tcp_congestion_control).
func congestionControl(name string) func(network, address string, c syscall.RawConn) error {
	if name == "" {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("TCP congestion control %q (see /proc/sys/net/ipv4/tcp_allowed_congestion_control): %w: %w", name, serr, errdefs.ErrInvalidArgument)
		}
		return nil
	}
}

// Listen announces a Server's TCP address: the connections it accepts, its
// control connections and tcp rails, send with the congestion control
// algorithm congestion ("" keeps the host's).
func Listen(ctx context.Context, addr, congestion string) (net.Listener, error) {
	lc := net.ListenConfig{Control: congestionControl(congestion)}
	return lc.Listen(ctx, "tcp", addr)
}
