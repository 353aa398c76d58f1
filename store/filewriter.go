package store

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// ringBuffers is how many chunks of one file may be in flight between Write
// and the hash and write stages.
const ringBuffers = 4

// fileWriter is one payload file of a build. Sequential writes are copied
// into a small ring of buffers and handed to two stages that run
// concurrently and independently: one hashes the bytes in order, one writes
// them to the file, so a write throttled by the page cache never stalls the
// hashing, and the other way round. The first positioned write drains the
// stages and switches the file to hashing by readback at Close. The fsync
// runs in the background, overlapped with later files; publication waits for it.
type fileWriter struct {
	path string
	size int64
	f    *os.File

	mu         sync.Mutex // guards the switch to positioned writes
	hasher     *artifact.FileHasher
	positioned bool
	pos        int64 // next sequential offset
	stages     *stages
	mapping    []byte // Map's, unmapped at Close

	closed    bool
	startSync func()
	synced    chan error
	entry     artifact.FileEntry
	err       error
}

func newFileWriter(path string, size int64, f *os.File, pool *sync.Pool) *fileWriter {
	w := &fileWriter{path: path, size: size, f: f, hasher: artifact.NewFileHasher(path, size)}
	w.stages = startStages(w, pool)
	return w
}

// chunk is one buffer in flight; the last stage done with it frees it.
type chunk struct {
	buf  []byte
	off  int64
	refs atomic.Int32
}

type stages struct {
	hashQ, writeQ chan *chunk
	inFlight      chan struct{} // a token per chunk in flight, at most ringBuffers
	pool          *sync.Pool    // buffers, shared by the files of a build
	wg            sync.WaitGroup
	errMu         sync.Mutex
	err           error
}

func startStages(w *fileWriter, pool *sync.Pool) *stages {
	s := &stages{hashQ: make(chan *chunk, ringBuffers), writeQ: make(chan *chunk, ringBuffers),
		inFlight: make(chan struct{}, ringBuffers), pool: pool}
	s.wg.Go(func() {
		for c := range s.hashQ {
			if s.failed() == nil {
				if _, err := w.hasher.Write(c.buf); err != nil {
					s.fail(err)
				}
			}
			s.release(c)
		}
	})
	s.wg.Go(func() {
		for c := range s.writeQ {
			if s.failed() == nil {
				if _, err := w.f.WriteAt(c.buf, c.off); err != nil {
					s.fail(classifyIO(err))
				}
			}
			s.release(c)
		}
	})
	return s
}

func (s *stages) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
}

func (s *stages) failed() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *stages) release(c *chunk) {
	if c.refs.Add(-1) == 0 {
		s.pool.Put(&c.buf)
		<-s.inFlight
	}
}

// buffer waits until fewer than ringBuffers chunks are in flight and returns
// a buffer of n bytes.
func (s *stages) buffer(n int) []byte {
	s.inFlight <- struct{}{}
	if b, ok := s.pool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

// drain stops the stages and returns their first error.
func (s *stages) drain() error {
	close(s.hashQ)
	close(s.writeQ)
	s.wg.Wait()
	return s.err
}

func (w *fileWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return 0, os.ErrClosed
	case w.positioned:
		return 0, fmt.Errorf("payload %s: sequential write after a positioned one: %w", w.path, errdefs.ErrFailedPrecondition)
	case int64(len(p)) > w.size-w.pos:
		return 0, fmt.Errorf("payload %s: write past the declared size %d: %w", w.path, w.size, errdefs.ErrOutOfRange)
	}
	if err := w.stages.failed(); err != nil {
		return 0, err
	}
	c := &chunk{buf: w.stages.buffer(len(p)), off: w.pos}
	copy(c.buf, p)
	c.refs.Store(2)
	w.stages.hashQ <- c
	w.stages.writeQ <- c
	if w.pos == 0 {
		faultPoint("write.mid-payload")
	}
	w.pos += int64(len(p))
	return len(p), nil
}

// WriteAt writes at any offset and may be called from several goroutines.
func (w *fileWriter) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > w.size-off {
		return 0, fmt.Errorf("payload %s: write at %d+%d past the declared size %d: %w", w.path, off, len(p), w.size, errdefs.ErrOutOfRange)
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return 0, os.ErrClosed
	}
	if err := w.position(); err != nil {
		w.mu.Unlock()
		return 0, err
	}
	w.mu.Unlock()
	n, err := w.f.WriteAt(p, off)
	return n, classifyIO(err)
}

// position switches the file to positioned writes, hashed by reading it
// back at Close: it drains the sequential stages. The caller holds w.mu.
func (w *fileWriter) position() error {
	if w.positioned {
		return nil
	}
	w.positioned = true
	err := w.stages.drain()
	w.hasher.Abort()
	return err
}

// Close finishes the hashes and prepares the fsync, which the build starts
// once the next file is created (or at publication): on ext4 an fsync's
// journal commit would otherwise stall the next file's fallocate.
func (w *fileWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.unmap()
	if w.positioned {
		w.entry, w.err = artifact.HashFile(w.f, w.path, w.size)
	} else if w.err = w.stages.drain(); w.err == nil {
		w.entry, w.err = w.hasher.Sum()
	} else {
		w.hasher.Abort()
	}
	if w.err != nil {
		w.f.Close()
		return w.err
	}
	w.synced = make(chan error, 1)
	defer faultPoint("write.after-close")
	w.startSync = func() {
		err := w.f.Sync()
		if cerr := w.f.Close(); err == nil {
			err = cerr
		}
		w.synced <- classifyIO(err)
	}
	return nil
}

// discard stops a file that will not be published: an open one's stages are
// drained and its descriptor closed; a closed one's fsync is awaited.
func (w *fileWriter) discard() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.unmap()
		if !w.positioned {
			w.stages.drain()
			w.hasher.Abort()
		}
		w.f.Close()
		return
	}
	if w.startSync != nil {
		w.startSync()
		w.startSync = nil
	}
	if w.synced != nil {
		<-w.synced
		w.synced = nil
	}
}
