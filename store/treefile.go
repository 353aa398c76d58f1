package store

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// treeFile is the state of a file bound by its tensor tree
// (artifact.BindTree): bytes land by positioned writes in any order, from
// several goroutines; the writer keeps a copy of the header region as it is
// written and the producer reports each part's BLAKE3. Close derives the
// tree from them, never reading the file.
type treeFile struct {
	want artifact.FileEntry

	mu     sync.Mutex
	header []byte // [0, want.DataStart) as written
	parts  []artifact.Sum
	dirty  atomic.Int64 // bytes written since the file's writeback was last started
	landed int64        // bytes of the parts reported, under mu: what an interrupted build keeps
}

func newTreeFile(want artifact.FileEntry) *treeFile {
	return &treeFile{want: want, header: make([]byte, want.DataStart), parts: make([]artifact.Sum, want.Parts())}
}

// WriteAt places bytes anywhere in a BindTree file; it may be called from
// several goroutines at once. An ordered file refuses it: its sha256 is
// computed in order.
func (w *fileWriter) WriteAt(p []byte, off int64) (int, error) {
	if w.tree == nil {
		return 0, fmt.Errorf("payload %s: positioned write to a file hashed in order: %w", w.path, errdefs.ErrFailedPrecondition)
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return 0, os.ErrClosed
	}
	return w.writeAt(p, off)
}

func (w *fileWriter) writeAt(p []byte, off int64) (int, error) {
	if off < 0 || int64(len(p)) > w.size-off {
		return 0, fmt.Errorf("payload %s: write at %d+%d past the declared size %d: %w", w.path, off, len(p), w.size, errdefs.ErrOutOfRange)
	}
	if t := w.tree; off < int64(len(t.header)) {
		t.mu.Lock()
		copy(t.header[off:], p)
		t.mu.Unlock()
	}
	n, err := pwrite(w.f, p, off)
	if w.tree.dirty.Add(int64(n)) >= writebackChunk {
		w.tree.dirty.Store(0)
		writeBehind(w.f, w.size, 0, w.size)
	}
	return n, err
}

// SetPartBLAKE3 implements artifact.BoundFileWriter.
func (w *fileWriter) SetPartBLAKE3(i int, sum artifact.Sum) error {
	if w.tree == nil {
		return fmt.Errorf("payload %s: part digests reported for a file hashed in order: %w", w.path, errdefs.ErrFailedPrecondition)
	}
	t := w.tree
	if i < 0 || i >= len(t.parts) {
		return fmt.Errorf("payload %s: part %d of %d: %w", w.path, i, len(t.parts), errdefs.ErrOutOfRange)
	}
	t.mu.Lock()
	if t.parts[i] == (artifact.Sum{}) && i < len(t.want.Tensors) {
		t.landed += t.want.Tensors[i].Length
	}
	t.parts[i] = sum
	t.mu.Unlock()
	return nil
}

// landedBytes are the bytes of the parts reported so far.
func (t *treeFile) landedBytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.landed
}

func (t *treeFile) finish() (artifact.FileEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return artifact.FinishTree(t.want, t.header, t.parts)
}
