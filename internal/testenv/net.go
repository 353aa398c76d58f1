package testenv

import (
	"net"
	"sync/atomic"
	"testing"
)

// ClosedAddr is a 127.0.0.1 address nothing listens on: an endpoint that
// is down, refusing every connection.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// BlackHole is a 127.0.0.1 address that accepts connections and never
// answers, until the test ends: an endpoint whose clients can only time
// out.
func BlackHole(t testing.TB) string {
	t.Helper()
	addr, _ := CountingBlackHole(t)
	return addr
}

// CountingBlackHole is a BlackHole that counts the connections it accepted.
func CountingBlackHole(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			n.Add(1)
			conns = append(conns, c)
		}
	}()
	return l.Addr().String(), &n
}
