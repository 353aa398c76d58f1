package peer

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rcvLowat is a TCP connection's SO_RCVLOWAT.
func rcvLowat(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TestWakeReader reads range data and then a short answer through a wakeReader over loopback TCP,
// the sender writing in small parts with pauses: every read completes (a mark past what is left to
// come would leave a read waiting until its deadline), the bytes are the sender's, and the socket's
// mark is what each read asked for.
func TestWakeReader(t *testing.T) {
	for _, tc := range []struct {
		name      string
		data      int // range data read with io.ReadFull
		part      int // the sender's writes
		shortRead int // then a read through lowest(), the mark back at 1
	}{
		{"more than wakeAfter", 3*wakeAfter + 1000, 64 << 10, 3},
		{"less than wakeAfter", 100 << 10, 16 << 10, 40},
		{"one segment", 1000, 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := make([]byte, tc.data+tc.shortRead)
			for i := range want {
				want[i] = byte(i * 7)
			}
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				for b := want; len(b) > 0; {
					n := min(tc.part, len(b))
					if _, err := c.Write(b[:n]); err != nil {
						return
					}
					b = b[n:]
					time.Sleep(2 * time.Millisecond)
				}
				_, _ = io.Copy(io.Discard, c) // hold the connection open: no EOF wakes a read
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tcp := c.(*net.TCPConn)
			if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			if _, err := br.Peek(1); err != nil { // the buffer holds the first bytes, as after a status
				t.Fatal(err)
			}
			// The mark after the data's first read: what it lacks beyond the
			// buffered bytes, at most wakeAfter, at least 1.
			wantMark := max(1, min(tc.data-br.Buffered(), wakeAfter))
			w := newWakeReader(c, br)
			got := make([]byte, tc.data+tc.shortRead)
			first := true
			for off := 0; off < tc.data; {
				n, err := w.Read(got[off:tc.data])
				if err != nil {
					t.Fatalf("data read at %d of %d: %v", off, tc.data, err)
				}
				if first && br.Buffered() == 0 {
					if m := rcvLowat(t, tcp); m != wantMark {
						t.Errorf("mark after the first read %d, want %d", m, wantMark)
					}
					first = false
				}
				off += n
			}
			if _, err := io.ReadFull(w.lowest(), got[tc.data:]); err != nil {
				t.Fatalf("the short read after the data: %v", err)
			}
			if m := rcvLowat(t, tcp); m != 1 {
				t.Errorf("mark after lowest %d, want 1", m)
			}
			if !bytes.Equal(got, want) {
				t.Error("the bytes read are not the sender's")
			}
		})
	}
}

// TestWakeReaderNotTCP: a connection without a descriptor (TLS, a pipe) reads as it would unwrapped.
func TestWakeReaderNotTCP(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = a.Write([]byte("range data")) }()
	w := newWakeReader(b, bufio.NewReader(b))
	if w.raw != nil {
		t.Fatal("a pipe has no descriptor to mark")
	}
	got := make([]byte, len("range data"))
	if _, err := io.ReadFull(w, got); err != nil || string(got) != "range data" {
		t.Fatalf("read %q, %v", got, err)
	}
}
