package producers_test

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/weightsnap/weightsnap/artifact"
)

// memWriter is an in-memory artifact.Writer for producer tests.
type memWriter struct {
	mu    sync.Mutex
	files map[string]*memFile
}

func newMemWriter() *memWriter { return &memWriter{files: map[string]*memFile{}} }

func (w *memWriter) Create(path string, size int64) (artifact.FileWriter, error) {
	if err := artifact.ValidateRelPath(path); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.files[path]; dup {
		return nil, fmt.Errorf("%s created twice", path)
	}
	f := &memFile{path: path, size: size, buf: make([]byte, 0, size)}
	w.files[path] = f
	return f, nil
}

// bytes returns a closed file's content.
func (w *memWriter) bytes(path string) ([]byte, bool) {
	f, ok := w.files[path]
	if !ok || !f.closed {
		return nil, false
	}
	return f.buf, true
}

type memFile struct {
	path   string
	size   int64
	buf    []byte
	closed bool
	writes int
}

func (f *memFile) Write(p []byte) (int, error) {
	if f.closed {
		return 0, fmt.Errorf("%s: write after close", f.path)
	}
	if int64(len(f.buf)+len(p)) > f.size {
		return 0, fmt.Errorf("%s: write past the declared size %d", f.path, f.size)
	}
	f.buf = append(f.buf, p...)
	f.writes++
	return len(p), nil
}

func (f *memFile) Close() error {
	if int64(len(f.buf)) != f.size {
		return fmt.Errorf("%s: %d of %d bytes written", f.path, len(f.buf), f.size)
	}
	f.closed = true
	return nil
}

func (f *memFile) Entry() (artifact.FileEntry, error) {
	return artifact.HashFile(bytes.NewReader(f.buf), artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: f.path, Size: f.size}}})
}
