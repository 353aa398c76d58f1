package producers

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/weightsnap/weightsnap/artifact/cast"
)

// Buffer sizes of the streaming engine: an output file is assembled in
// chunkSize buffers, nBuffers of them in flight, and small source runs are
// read through a window of windowSize.
const (
	chunkSize  = 4 << 20
	nBuffers   = 3
	windowSize = 4 << 20
	// directMin is the smallest run that is read straight into an output
	// buffer rather than through the window.
	directMin = 64 << 10
)

// sink writes filled buffers to a payload file on its own goroutine, so
// that reading and converting the next chunk overlaps the store's write and
// hash of the previous one.
type sink struct {
	w     io.Writer
	queue chan []byte
	free  chan []byte
	done  chan struct{}
	err   error // set before done is closed
	bad   atomic.Bool
}

func newSink(w io.Writer) *sink {
	s := &sink{w: w, queue: make(chan []byte, nBuffers), free: make(chan []byte, nBuffers), done: make(chan struct{})}
	for range nBuffers {
		s.free <- make([]byte, chunkSize)
	}
	go func() {
		defer close(s.done)
		for b := range s.queue {
			if s.err == nil {
				if _, err := s.w.Write(b); err != nil {
					s.err = err
					s.bad.Store(true)
				}
			}
			s.free <- b[:cap(b)]
		}
	}()
	return s
}

// emitter assembles one output file's bytes in the sink's buffers,
// converting between dtypes on the way when asked to.
type emitter struct {
	ctx  context.Context
	s    *sink
	buf  []byte
	n    int
	from string // cast source dtype; "" for none
	to   string
}

func newEmitter(ctx context.Context, w io.Writer) *emitter {
	return &emitter{ctx: ctx, s: newSink(w)}
}

// space returns the free part of the current buffer, never empty.
func (e *emitter) space() ([]byte, error) {
	if e.buf != nil && e.n == len(e.buf) {
		if err := e.flush(); err != nil {
			return nil, err
		}
	}
	if e.buf == nil {
		select {
		case e.buf = <-e.s.free:
		case <-e.ctx.Done():
			return nil, e.ctx.Err()
		}
		e.n = 0
	}
	return e.buf[e.n:], nil
}

func (e *emitter) flush() error {
	if e.s.bad.Load() {
		return e.s.err
	}
	if e.buf == nil || e.n == 0 {
		return nil
	}
	if err := e.ctx.Err(); err != nil {
		return err
	}
	e.s.queue <- e.buf[:e.n]
	e.buf, e.n = nil, 0
	return nil
}

// write appends p unchanged.
func (e *emitter) write(p []byte) error {
	for len(p) > 0 {
		dst, err := e.space()
		if err != nil {
			return err
		}
		c := copy(dst, p)
		e.n += c
		p = p[c:]
	}
	return nil
}

// zeros appends the output of n zero source bytes (zero is +0 in every dtype).
func (e *emitter) zeros(n int64) error {
	if e.from != "" {
		n = n / int64(cast.ElemSize(e.from)) * int64(cast.ElemSize(e.to))
	}
	for n > 0 {
		dst, err := e.space()
		if err != nil {
			return err
		}
		c := min(int64(len(dst)), n)
		clear(dst[:c])
		e.n += int(c)
		n -= c
	}
	return nil
}

// convert appends src converted from e.from to e.to; src is whole elements.
func (e *emitter) convert(src []byte) error {
	fs, ts := cast.ElemSize(e.from), cast.ElemSize(e.to)
	for len(src) > 0 {
		dst, err := e.space()
		if err != nil {
			return err
		}
		k := min(len(dst)/ts, len(src)/fs)
		if k == 0 { // the tail of this buffer cannot hold one element
			if err := e.flush(); err != nil {
				return err
			}
			continue
		}
		if err := cast.Convert(dst[:k*ts], src[:k*fs], e.from, e.to); err != nil {
			return err
		}
		e.n += k * ts
		src = src[k*fs:]
	}
	return nil
}

// readDirect appends n bytes of f at off, read straight into the buffers.
func (e *emitter) readDirect(f *os.File, off, n int64, read *atomic.Int64) error {
	for n > 0 {
		dst, err := e.space()
		if err != nil {
			return err
		}
		c := min(int64(len(dst)), n)
		if err := preadFull(f, dst[:c], off); err != nil {
			return err
		}
		read.Add(c)
		e.n += int(c)
		off += c
		n -= c
	}
	return nil
}

// close flushes and waits for every write; it returns the first failure.
func (e *emitter) close() error {
	err := e.flush()
	close(e.s.queue)
	<-e.s.done
	if e.s.err != nil {
		return e.s.err
	}
	return err
}

// window serves small runs of one source tensor from a read-ahead buffer.
type window struct {
	f    *os.File
	base int64 // file offset of the tensor's data
	tlen int64 // tensor length
	buf  []byte
	off  int64 // tensor offset of buf[0]
	n    int64 // valid bytes in buf
	read *atomic.Int64
}

func (w *window) reset(f *os.File, base, tlen int64) {
	w.f, w.base, w.tlen, w.off, w.n = f, base, tlen, 0, 0
}

// slice returns bytes [off, off+n) of the tensor; n <= len(w.buf).
func (w *window) slice(off, n int64) ([]byte, error) {
	if off >= w.off && off+n <= w.off+w.n {
		return w.buf[off-w.off : off-w.off+n], nil
	}
	l := min(int64(len(w.buf)), w.tlen-off)
	if l < n {
		return nil, fmt.Errorf("window: run [%d,+%d) past the tensor's %d bytes", off, n, w.tlen)
	}
	if err := preadFull(w.f, w.buf[:l], w.base+off); err != nil {
		w.n = 0
		return nil, err
	}
	w.read.Add(l)
	w.off, w.n = off, l
	return w.buf[:n], nil
}

func preadFull(f *os.File, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %s at %d: %w (the source shrank?)", f.Name(), off, err)
}
