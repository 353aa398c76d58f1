package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/netfail"
)

// A stream that ends before the message does is bad input and a peer that
// hung up, whichever byte it ends at.
func TestReadFullTruncated(t *testing.T) {
	for _, n := range []int{0, 1, 7} {
		err := ReadFull(bytes.NewReader(make([]byte, n)), make([]byte, 8), "hello")
		if !errdefs.IsInvalidArgument(err) || !errors.Is(err, io.ErrUnexpectedEOF) || !netfail.Unreachable(err) {
			t.Errorf("%d of 8 bytes: %v: want invalid argument, unexpected EOF and unreachable", n, err)
		}
	}
	if err := ReadFull(bytes.NewReader(make([]byte, 8)), make([]byte, 8), "hello"); err != nil {
		t.Errorf("whole message: %v", err)
	}
}
