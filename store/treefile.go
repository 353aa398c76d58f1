package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
)

// treeFile is the state of a file bound by its tensor tree
// (artifact.BindTree): bytes land by positioned writes in any order, from
// several goroutines; the writer keeps a copy of the header region as it is
// written and the producer reports each part's BLAKE3. Close derives the
// tree from them, never reading the file, save to check its sha256
// (artifact.Binding.CheckSHA256).
type treeFile struct {
	want     artifact.FileEntry
	checkSHA bool

	mu     sync.Mutex
	header []byte // [0, want.DataStart) as written
	parts  []artifact.Sum
	dirty  atomic.Int64 // bytes written since the file's writeback was last started
	landed int64        // bytes of the parts reported, under mu: what an interrupted build keeps
}

func newTreeFile(b artifact.Binding) *treeFile {
	return &treeFile{want: b.Want, checkSHA: b.CheckSHA256, header: make([]byte, b.Want.DataStart), parts: make([]artifact.Sum, b.Want.Parts())}
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
		drop := w.size
		if w.tree.checkSHA {
			drop = 0 // kept, clean once written back, for finish to read back from memory
		}
		writeBehind(w.f, drop, 0, w.size)
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

// finish derives the file's entry, checked against the record; with
// checkSHA it then reads f back whole for its sha256.
func (t *treeFile) finish(f *os.File) (artifact.FileEntry, error) {
	t.mu.Lock()
	e, err := artifact.FinishTree(t.want, t.header, t.parts)
	t.mu.Unlock()
	if err != nil || !t.checkSHA {
		return e, err
	}
	got, err := readSHA256(f, t.want.Size)
	if err != nil {
		return artifact.FileEntry{}, fmt.Errorf("payload %s: reading it back for its sha256: %w", t.want.Path, ioerr.Classify(err, noSpace))
	}
	if got != e.SHA256 {
		return artifact.FileEntry{}, &artifact.EntryMismatchError{Path: t.want.Path, Field: "sha256", Want: e.SHA256, Got: got}
	}
	return e, nil
}

// readSHA256 is the hex sha256 of the first size bytes of the payload f,
// which is open write-only (a second descriptor reads it, as for Map).
func readSHA256(f *os.File, size int64) (string, error) {
	r, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return "", err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(r, 0, size), make([]byte, verifyChunk)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
