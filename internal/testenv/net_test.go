package testenv

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestClosedAddrRefuses(t *testing.T) {
	_, err := net.DialTimeout("tcp", ClosedAddr(t), time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial: %v, want connection refused", err)
	}
}

func TestBlackHoleNeverAnswers(t *testing.T) {
	c, err := net.DialTimeout("tcp", BlackHole(t), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want a timeout", err)
	}
}
