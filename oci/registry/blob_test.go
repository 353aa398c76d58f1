package registry

import (
	"net"
	"testing"
	"time"
)

// TestTCPRTT: a loopback connection has a round trip, and a short one.
func TestTCPRTT(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			buf := make([]byte, 1)
			c.Read(buf)
			c.Write(buf)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := []byte{1}
	if _, err := c.Write(buf); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	if rtt := tcpRTT(c); rtt <= 0 || rtt >= 2*time.Millisecond {
		t.Fatalf("loopback round trip %v", rtt)
	}
	if rtt := tcpRTT(nil); rtt != 0 {
		t.Fatalf("no connection: %v", rtt)
	}
}
