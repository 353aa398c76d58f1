package store

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
)

// ringBuffers is how many chunks of one file may be in flight between Write
// and the hash and write stages.
const ringBuffers = 4

// fileWriter is one payload file of a build. A file written in order
// (Write, ReadFrom, WriteBuffer) is hashed while it is written: its bytes
// are copied, or read, into a small ring of buffers, or lent in the
// caller's, and handed to two stages that run concurrently and
// independently, one hashing the bytes in order, one writing them to the
// file, so a write throttled by the page cache never stalls the hashing, and
// the other way round. The write stage writes whole pages by direct I/O
// where the filesystem takes it (direct.go), the rest through the page
// cache, of which the file holds a few chunks at most (writeback.go). A
// file bound by its tensor tree (artifact.BindTree) is written by
// positioned writes in any order instead, and is not read
// back but to check its sha256 where asked (treeFile). The fsync runs in the background, overlapped with later
// files; publication waits for it.
type fileWriter struct {
	path string
	size int64
	f    *os.File

	mu      sync.Mutex
	hasher  *artifact.FileHasher // ordered files
	pos     int64                // next sequential offset
	stages  *stages
	tree    *treeFile // BindTree files
	mapping []byte    // Map's, for BindTree files; unmapped at Close

	// A build that announces its progress records the ranges both written
	// and checked against the record (onChecked, set for bindings that
	// check tensors): how far the write stage wrote, and how far is recorded.
	onChecked func(off, n int64) error
	progMu    sync.Mutex
	written   int64
	recorded  int64

	// A file written in order by a build of a known identity keeps a
	// checkpoint of its synced, hashed prefix (checkpoint.go), every
	// checkpointEvery bytes and when its build stops without publishing:
	// the hash stage snapshots its state, and once the write stage has
	// written that far the checkpointer syncs the file and records it.
	keep    func(off int64, state []byte) error
	ckMu    sync.Mutex
	snap    *snapshot // the hash stage's latest due, not handed over yet
	latest  snapshot  // the state where the last part ended
	wrote   int64     // where the write stage's last write ended
	lastAt  int64     // offset of the last snapshot taken
	every   int64     // bytes between two snapshots
	ckQ     chan snapshot
	ckDone  chan struct{}
	keptOff atomic.Int64 // the last checkpoint recorded
	whole   bool         // closed with every byte written and hashed

	closed    bool
	startSync func()
	synced    chan error
	entry     artifact.FileEntry
	err       error
}

// writerOptions are a new fileWriter's: onChecked records checked ranges
// (a seeding build); keep records checkpoints (a build of a known
// identity); a file continued from a kept prefix starts at from, its
// hasher resumed (artifact.FileHasher.ResumeAt).
type writerOptions struct {
	onChecked func(off, n int64) error
	keep      func(off int64, state []byte) error
	every     int64 // bytes between two checkpoints
	from      int64
	hasher    *artifact.FileHasher
}

func newFileWriter(b artifact.Binding, f *os.File, pool *sync.Pool, o writerOptions) (*fileWriter, error) {
	w := &fileWriter{path: b.Want.Path, size: b.Want.Size, f: f, onChecked: o.onChecked}
	if b.By == artifact.BindTree {
		w.tree = newTreeFile(b)
		return w, nil
	}
	h := o.hasher
	if h == nil {
		var err error
		if h, err = artifact.NewFileHasher(b); err != nil {
			return nil, err
		}
	}
	w.hasher = h
	w.pos, w.written, w.wrote, w.lastAt = o.from, o.from, o.from, o.from
	if o.keep != nil {
		w.keep, w.every, w.ckQ, w.ckDone = o.keep, o.every, make(chan snapshot, 1), make(chan struct{})
		go w.checkpointer()
	}
	w.stages = startStages(w, pool)
	if o.from > 0 {
		// The kept prefix's tensors were checked again as it was read back.
		if err := w.advance(0); err != nil {
			w.stages.drain()
			w.stopCheckpoints()
			h.Abort()
			return nil, err
		}
	}
	return w, nil
}

// hashChunk hashes a chunk in the hash stage. A file that keeps
// checkpoints is hashed part by part (artifact.FileHasher.NextBoundary):
// a state is kept where each part ends.
func (w *fileWriter) hashChunk(c *chunk) error {
	buf, pos := c.buf, c.off
	for len(buf) > 0 {
		k := int64(len(buf))
		if w.keep != nil {
			if nb := w.hasher.NextBoundary(); nb > pos && nb-pos < k {
				k = nb - pos
			}
		}
		if _, err := w.hasher.Write(buf[:k]); err != nil {
			return err
		}
		buf, pos = buf[k:], pos+k
		w.snapshotted()
	}
	return w.advance(0)
}

// chunk is one buffer in flight; the last stage done with it frees it:
// back to the pool, or to its owner by done (WriteBuffer).
type chunk struct {
	buf  []byte
	off  int64
	refs atomic.Int32
	done func()
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
				if err := w.hashChunk(c); err != nil {
					s.fail(err)
				}
			}
			s.release(c)
		}
	})
	started := w.pos // the file's writeback is under way up to here; read before any submit
	direct := openDirect(w.f)
	s.wg.Go(func() {
		defer direct.close()
		for c := range s.writeQ {
			if s.failed() == nil {
				if err := w.writeChunk(direct, c); err != nil {
					// Nothing of a failed write is recorded as written:
					// a seeding build would offer those bytes to peers.
					s.fail(err)
					s.release(c)
					continue
				}
				end := c.off + int64(len(c.buf))
				if end-started >= writebackChunk {
					writeBehind(w.f, started, started, end)
					started = end
				}
				if err := w.advance(end); err != nil {
					s.fail(err)
				}
				w.wroteTo(end)
			}
			s.release(c)
		}
	})
	return s
}

// advance records the bytes both written and checked that are not
// recorded yet, when the build records its progress; wrote is where the
// write stage's last write ended (0 from the hash stage).
func (w *fileWriter) advance(wrote int64) error {
	if w.onChecked == nil {
		return nil
	}
	w.progMu.Lock()
	defer w.progMu.Unlock()
	w.written = max(w.written, wrote)
	end := min(w.written, w.hasher.Checked())
	if end <= w.recorded {
		return nil
	}
	off := w.recorded
	w.recorded = end
	return w.onChecked(off, end-off)
}

// writeChunk writes a chunk in the write stage: its whole pages by direct
// I/O where direct takes them (direct.go), else through the page cache.
func (w *fileWriter) writeChunk(direct *directFile, c *chunk) error {
	done, err := direct.writeAt(c.buf, c.off)
	if err != nil || done {
		return ioerr.Classify(err, noSpace)
	}
	_, err = pwrite(w.f, c.buf, c.off)
	return err
}

// pwrite writes p at off in pieces the page cache takes fast
// (artifact.WriteAt).
func pwrite(f *os.File, p []byte, off int64) (int, error) {
	n, err := artifact.WriteAt(f, p, off)
	return n, ioerr.Classify(err, noSpace)
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
		if c.done != nil {
			c.done()
		} else {
			s.pool.Put(&c.buf)
		}
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

// unbuffer gives back a buffer that carried no bytes to the stages.
func (s *stages) unbuffer(b []byte) {
	s.pool.Put(&b)
	<-s.inFlight
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
	return w.write(p)
}

// write is Write for a caller that holds w.mu.
func (w *fileWriter) write(p []byte) (int, error) {
	if err := w.canAppend(len(p)); err != nil {
		return 0, err
	}
	if w.tree != nil {
		n, err := w.writeAt(p, w.pos)
		w.pos += int64(n)
		return n, err
	}
	for rest := p; len(rest) > 0; {
		buf := w.stages.buffer(min(len(rest), chunkSize))
		rest = rest[copy(buf, rest):]
		w.submit(buf, nil)
	}
	return len(p), nil
}

// WriteBuffer implements artifact.FileWriter: b goes to the hash and
// write stages as it is, and done is called once both are through with it.
func (w *fileWriter) WriteBuffer(b []byte, done func()) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tree != nil || len(b) == 0 { // nothing to lend: a BindTree file's bytes go straight to the file
		defer done()
		_, err := w.write(b)
		return err
	}
	if err := w.canAppend(len(b)); err != nil {
		done()
		return err
	}
	w.stages.inFlight <- struct{}{}
	w.submit(b, done)
	return nil
}

// canAppend says whether n more bytes may be written in order. The caller
// holds w.mu.
func (w *fileWriter) canAppend(n int) error {
	switch {
	case w.closed:
		return os.ErrClosed
	case int64(n) > w.size-w.pos:
		return fmt.Errorf("payload %s: write past the declared size %d: %w", w.path, w.size, errdefs.ErrOutOfRange)
	case w.tree == nil:
		return w.stages.failed()
	}
	return nil
}

// chunkSize is the size of the buffers between a file's writer and its
// stages: ReadFrom reads this much at a time, and Write copies larger
// writes in pieces of this size, so the ring holds at most ringBuffers of
// them whatever the caller writes.
const chunkSize = 1 << 20

// ReadFrom implements io.ReaderFrom: it reads r to its end straight into
// the buffers of the hash and write stages, so a file written in order
// costs no copy beyond the read itself, and the next buffer is read while
// the stages work on the previous ones. It returns r's failure as it is,
// unwrapped, so a caller can tell it from the writer's own.
func (w *fileWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.tree != nil {
		return io.CopyBuffer(struct{ io.Writer }{w}, r, make([]byte, chunkSize))
	}
	var total int64
	for {
		w.mu.Lock()
		left := w.size - w.pos
		err := w.stages.failed()
		if w.closed {
			err = os.ErrClosed
		}
		w.mu.Unlock()
		if err != nil {
			return total, err
		}
		// One byte past the declared size tells a longer source from one
		// that ends exactly there.
		buf := w.stages.buffer(int(min(left+1, chunkSize)))
		n, rerr := io.ReadFull(r, buf)
		if int64(n) > left {
			w.stages.unbuffer(buf)
			return total, fmt.Errorf("payload %s: write past the declared size %d: %w", w.path, w.size, errdefs.ErrOutOfRange)
		}
		if n == 0 {
			w.stages.unbuffer(buf)
		} else if err := w.submitLocked(buf[:n]); err != nil {
			return total, err
		}
		total += int64(n)
		switch rerr {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return total, nil
		default:
			return total, rerr
		}
	}
}

// submitLocked is submit for a caller that does not hold w.mu.
func (w *fileWriter) submitLocked(buf []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.stages.unbuffer(buf)
		return os.ErrClosed
	}
	w.submit(buf, nil)
	return nil
}

// submit hands buf, the file's next bytes, to the hash and write stages:
// a buffer from w.stages.buffer, or with done one its owner lent, in a
// place in the ring the caller took. The caller holds w.mu.
func (w *fileWriter) submit(buf []byte, done func()) {
	c := &chunk{buf: buf, off: w.pos, done: done}
	c.refs.Store(2)
	w.stages.hashQ <- c
	w.stages.writeQ <- c
	if w.pos == 0 {
		faultPoint("write.mid-payload")
	}
	w.pos += int64(len(buf))
}

// Close finishes the file's hashes and prepares its fsync.
//
// The build starts the fsync once the next file is created, or at
// publication: on ext4 an fsync's journal commit would otherwise stall the
// next file's fallocate. A file bound by its tree starts its fsync at once.
// A fetch creates and preallocates all its files before any byte lands, so
// the disk writes of the files it finished overlap the transfer of the
// others.
func (w *fileWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.unmap()
	switch {
	case w.tree != nil:
		w.entry, w.err = w.tree.finish(w.f)
	default:
		w.err = w.stages.drain()
		w.stopCheckpoints()
		if w.err == nil && w.pos < w.size {
			// Closed part way (its producer stopped): what it wrote is
			// kept, should the build be released rather than discarded.
			w.keepStopped(nil)
		}
		if w.err == nil {
			w.entry, w.err = w.hasher.Sum()
		} else {
			w.hasher.Abort()
		}
	}
	if w.err != nil {
		w.f.Close()
		return w.err
	}
	w.whole = true
	w.synced = make(chan error, 1)
	defer faultPoint("write.after-close")
	w.startSync = func() {
		err := syncHardened(w.f)
		if err == nil {
			dropCached(w.f)
			if w.keep != nil {
				w.record(w.size, nil) // written whole and synced
			}
		}
		if cerr := w.f.Close(); err == nil {
			err = cerr
		}
		w.synced <- ioerr.Classify(err, noSpace)
	}
	if w.tree != nil {
		go w.startSync()
		w.startSync = nil
	}
	return nil
}

// discard stops a file that will not be published: an open one's stages are
// drained, with keep a last checkpoint recorded, and its descriptor
// closed; a closed one's fsync is awaited.
func (w *fileWriter) discard(keep bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.unmap()
		if w.stages != nil {
			err := w.stages.drain()
			w.stopCheckpoints()
			if keep {
				w.keepStopped(err)
			}
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
