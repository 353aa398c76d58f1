package artifact

import (
	"context"
	"fmt"
	"io"
)

// copyChunk is the buffer size of CopyAhead.
const copyChunk = 1 << 20

// CopyAhead copies exactly n bytes from r to write, reading the next buffer
// while the previous one is written. It returns how many bytes write
// accepted; a short source is io.ErrUnexpectedEOF.
func CopyAhead(ctx context.Context, r io.Reader, n int64, write func([]byte) error) (int64, error) {
	type chunk struct {
		b   []byte
		err error
	}
	full := make(chan chunk, 1)
	free := make(chan []byte, 2)
	free <- make([]byte, copyChunk)
	free <- make([]byte, copyChunk)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(full)
		left := n
		for left > 0 {
			var b []byte
			select {
			case b = <-free:
			case <-stop:
				return
			}
			k, err := io.ReadFull(r, b[:min(int64(len(b)), left)])
			left -= int64(k)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			select {
			case full <- chunk{b[:k], err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var written int64
	for c := range full {
		if len(c.b) > 0 {
			if err := ctx.Err(); err != nil {
				return written, err
			}
			if err := write(c.b); err != nil {
				return written, err
			}
			written += int64(len(c.b))
		}
		if c.err != nil {
			return written, fmt.Errorf("read blob: %w", c.err)
		}
		free <- c.b[:cap(c.b)]
	}
	return written, nil
}
