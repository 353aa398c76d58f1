package peer

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"golang.org/x/sys/unix"
)

// congestionOf is the congestion control algorithm of a TCP connection.
func congestionOf(t *testing.T, c net.Conn) string {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return strings.TrimRight(name, "\x00")
}

func TestListenCongestion(t *testing.T) {
	host, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		testenv.Skip(t, "the host's TCP congestion control: "+err.Error())
	}
	for _, tc := range []struct {
		name, congestion, want string
		invalid                bool
	}{
		{"host's", "", strings.TrimSpace(string(host)), false},
		{"reno", "reno", "reno", false}, // built into every kernel and allowed to every user
		{"unknown", "no-such-algorithm", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l, err := Listen(ctx, "127.0.0.1:0", tc.congestion)
			if tc.invalid {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("Listen with %q: %v, want an invalid argument", tc.congestion, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, _ := l.Accept()
				accepted <- c
			}()
			d := net.Dialer{Control: congestionControl(tc.congestion)}
			dialed, err := d.DialContext(ctx, "tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer dialed.Close()
			served := <-accepted
			if served == nil {
				t.Fatal("accept failed")
			}
			defer served.Close()
			if got := congestionOf(t, served); got != tc.want {
				t.Errorf("served connection: %q, want %q", got, tc.want)
			}
			if got := congestionOf(t, dialed); got != tc.want {
				t.Errorf("opened connection: %q, want %q", got, tc.want)
			}
		})
	}
}
