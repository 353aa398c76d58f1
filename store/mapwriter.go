package store

import (
	"fmt"
	"os"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/ioerr"
	"golang.org/x/sys/unix"
)

// Map implements artifact.BoundFileWriter for a BindTree file: the file, at
// its declared size, as a shared writable mapping, for transports that
// write into memory (one-sided RDMA reads land there). Bytes written
// through it count as positioned writes; Close (or a discarded build)
// unmaps it, taking the header region from it first.
func (w *fileWriter) Map() ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return nil, os.ErrClosed
	case w.tree == nil:
		return nil, fmt.Errorf("payload %s: only a file bound by its tensor tree can be mapped: %w", w.path, errdefs.ErrFailedPrecondition)
	case w.mapping != nil || w.size == 0:
		return w.mapping, nil
	}
	// The payload is open write-only; a shared writable mapping needs a
	// descriptor that can read too.
	rw, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", w.f.Fd()), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", w.path, err)
	}
	defer rw.Close()
	// Preallocation normally sets the size; where the filesystem could not
	// preallocate, a mapping past the end of the file would fault.
	if fi, err := rw.Stat(); err != nil || fi.Size() < w.size {
		if err := rw.Truncate(w.size); err != nil {
			return nil, ioerr.Classify(fmt.Errorf("size %s for mapping: %w", w.path, err), noSpace)
		}
	}
	m, err := unix.Mmap(int(rw.Fd()), 0, int(w.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, ioerr.Classify(fmt.Errorf("map %s: %w", w.path, err), noSpace)
	}
	w.mapping = m
	return m, nil
}

// unmap drops Map's mapping, keeping the header region written through it
// for the tree; the page cache keeps the rest for the fsync. The caller
// holds w.mu.
func (w *fileWriter) unmap() {
	if w.mapping == nil {
		return
	}
	t := w.tree
	t.mu.Lock()
	copy(t.header, w.mapping)
	t.mu.Unlock()
	unix.Munmap(w.mapping)
	w.mapping = nil
}
