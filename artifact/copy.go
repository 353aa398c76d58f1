package artifact

import (
	"context"
	"errors"
	"io"
)

// copyChunk is the buffer size of copyAhead.
const copyChunk = 1 << 20

// SourceError is a failure to read the bytes being copied, as opposed to a
// failure of the writer they were copied into.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return "read source: " + e.Err.Error() }

// Unwrap returns the read failure.
func (e *SourceError) Unwrap() error { return e.Err }

// CopyTo copies exactly n bytes from r into w and returns how many w
// accepted. A writer that implements io.ReaderFrom (the store's) reads r
// straight into its own buffers, hashing and writing each while it reads the
// next; any other is written from two buffers, the next read while the
// previous is written. A failure to read r, a short r included
// (io.ErrUnexpectedEOF), is a *SourceError; the writer's failures are
// returned as they are. progress, if set, is told of the bytes read.
func CopyTo(ctx context.Context, w io.Writer, r io.Reader, n int64, progress func(int64)) (int64, error) {
	src := &sourceReader{ctx: ctx, r: io.LimitReader(r, n), progress: progress}
	rf, ok := w.(io.ReaderFrom)
	if !ok {
		return copyAhead(src, n, w)
	}
	k, err := rf.ReadFrom(src)
	switch {
	case err != nil && src.err != nil && errors.Is(err, src.err):
		return k, &SourceError{err}
	case err != nil:
		return k, err
	case k < n:
		return k, &SourceError{io.ErrUnexpectedEOF}
	}
	return k, nil
}

// sourceReader is the source of a copy: it stops once ctx is done, counts
// progress and keeps its failure, so that CopyTo can tell it from the
// writer's.
type sourceReader struct {
	ctx      context.Context
	r        io.Reader
	progress func(int64)
	err      error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		s.err = err
		return 0, err
	}
	n, err := s.r.Read(p)
	if n > 0 && s.progress != nil {
		s.progress(int64(n))
	}
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// copyAhead copies exactly n bytes from r to w, reading the next buffer
// while the previous one is written.
func copyAhead(r *sourceReader, n int64, w io.Writer) (int64, error) {
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
			if _, err := w.Write(c.b); err != nil {
				return written, err
			}
			written += int64(len(c.b))
		}
		if c.err != nil {
			return written, &SourceError{c.err}
		}
		free <- c.b[:cap(c.b)]
	}
	return written, nil
}

// maxWrite is the most bytes one write(2) of WriteAt hands to the page
// cache. Since Linux 6.16, ext4 caches a file in large folios sized by the
// writes that fill it: a write of 2 MiB or more at a 2 MiB boundary takes a
// 2 MiB folio. On a virtual machine that reports free memory to its host
// (virtio-balloon free page reporting) such blocks are mostly memory the
// host has taken back and must fault in again, 4 KiB at a time, while small
// folios come from the free lists the host still backs: there 256 KiB
// writes run several times faster than 2 MiB ones.
const maxWrite = 256 << 10

// WriteAt writes p at off of f in pieces of at most 256 KiB, the writes
// the page cache takes fastest, and returns how many bytes it wrote.
func WriteAt(f io.WriterAt, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		k, err := f.WriteAt(p[n:min(len(p), n+maxWrite)], off+int64(n))
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
