package peer

import (
	"bufio"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// wakeAfter is the most bytes a rail's reader waits to have queued before
// the kernel wakes it: on a slow link a reader woken for every segment
// spends more on its wakeups than on hashing what it read.
const wakeAfter = 256 << 10

// wakeReader reads a rail's range data, asking the kernel to wake a read
// that waits only once the rest of what it was asked for, or wakeAfter
// bytes, has come (the socket's SO_RCVLOWAT). Everything else a rail
// reads must follow lowest, since the peer's answer to it may be shorter.
type wakeReader struct {
	br   *bufio.Reader
	raw  syscall.RawConn // nil where the connection is not plain TCP: a read wakes as usual
	mark int             // the socket's SO_RCVLOWAT
}

// newWakeReader reads through br, which buffers conn.
func newWakeReader(conn net.Conn, br *bufio.Reader) *wakeReader {
	w := &wakeReader{br: br, mark: 1}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			w.raw = raw
		}
	}
	return w
}

// Read reads into p, waking once what p lacks beyond the buffered bytes
// has come, or wakeAfter bytes: io.ReadFull asks for exactly what is left
// of a range's read, which the peer sends without waiting for this node.
func (w *wakeReader) Read(p []byte) (int, error) {
	w.set(len(p) - w.br.Buffered())
	return w.br.Read(p)
}

// lowest makes the next read wake on the first byte and returns the
// buffered reader, for what is not range data (a status, chaining values).
func (w *wakeReader) lowest() *bufio.Reader {
	w.set(1)
	return w.br
}

// set sets the socket's SO_RCVLOWAT to n, within 1 and wakeAfter; the
// kernel refuses it only on a closed socket, whose reads fail anyway.
func (w *wakeReader) set(n int) {
	n = max(1, min(n, wakeAfter))
	if w.raw == nil || n == w.mark {
		return
	}
	_ = w.raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n) == nil {
			w.mark = n
		}
	})
}
