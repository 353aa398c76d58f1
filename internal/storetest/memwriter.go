package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// MemWriter is an artifact.Writer in memory, for producers and extractors
// under test; its zero value is ready. It refuses a path the store would
// refuse, a path created twice and a write past a file's declared size,
// and a file closed short of its size.
type MemWriter struct {
	// SHA256Only makes a file's digest its sha256 alone, for payloads that
	// are not checkpoints (a file named .safetensors is otherwise read as
	// one, as the store does).
	SHA256Only bool

	mu    sync.Mutex
	files map[string]*memFile
}

// Create starts the file path of size bytes.
func (w *MemWriter) Create(path string, size int64) (artifact.FileWriter, error) {
	if err := artifact.ValidateRelPath(path); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.files == nil {
		w.files = map[string]*memFile{}
	}
	if _, dup := w.files[path]; dup {
		return nil, fmt.Errorf("payload %q created twice: %w", path, errdefs.ErrAlreadyExists)
	}
	f := &memFile{path: path, size: size, buf: make([]byte, 0, size), sha256Only: w.SHA256Only}
	w.files[path] = f
	return f, nil
}

// Bytes returns the content of path once it was closed whole.
func (w *MemWriter) Bytes(path string) ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, ok := w.files[path]
	if !ok || !f.closed || int64(len(f.buf)) != f.size {
		return nil, false
	}
	return f.buf, true
}

// Paths lists every file created, sorted.
func (w *MemWriter) Paths() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for p := range w.files {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Unclosed lists the files created and never closed, sorted.
func (w *MemWriter) Unclosed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for p, f := range w.files {
		if !f.closed {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

type memFile struct {
	path   string
	size   int64
	buf    []byte
	closed bool // Close was called

	sha256Only bool
}

func (f *memFile) Write(p []byte) (int, error) {
	if f.closed {
		return 0, fmt.Errorf("%s: write after close", f.path)
	}
	if int64(len(f.buf)+len(p)) > f.size {
		return 0, fmt.Errorf("%s: write past the declared size %d", f.path, f.size)
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

func (f *memFile) Close() error {
	f.closed = true
	if int64(len(f.buf)) != f.size {
		return fmt.Errorf("%s: %d of %d bytes written", f.path, len(f.buf), f.size)
	}
	return nil
}

func (f *memFile) Entry() (artifact.FileEntry, error) {
	if f.sha256Only {
		sum := sha256.Sum256(f.buf)
		return artifact.FileEntry{File: artifact.File{Path: f.path, Size: f.size, SHA256: hex.EncodeToString(sum[:])}}, nil
	}
	return artifact.HashFile(bytes.NewReader(f.buf), artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: f.path, Size: f.size}}})
}
