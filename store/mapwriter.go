package store

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Map implements artifact.MappedWriter: the file, at its declared size, as
// a shared writable mapping, for transports that write into memory. It
// switches the file to positioned writes; Close (or a discarded build)
// unmaps it.
func (w *fileWriter) Map() ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, os.ErrClosed
	}
	if err := w.position(); err != nil {
		return nil, err
	}
	if w.mapping != nil || w.size == 0 {
		return w.mapping, nil
	}
	// Preallocation normally sets the size; where the filesystem could not
	// preallocate, a mapping past the end of the file would fault.
	if fi, err := w.f.Stat(); err != nil || fi.Size() < w.size {
		if err := w.f.Truncate(w.size); err != nil {
			return nil, classifyIO(fmt.Errorf("size %s for mapping: %w", w.path, err))
		}
	}
	m, err := unix.Mmap(int(w.f.Fd()), 0, int(w.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, classifyIO(fmt.Errorf("map %s: %w", w.path, err))
	}
	w.mapping = m
	return m, nil
}

// unmap drops Map's mapping; the page cache keeps what was written through
// it for the hash and the fsync. The caller holds w.mu.
func (w *fileWriter) unmap() {
	if w.mapping != nil {
		unix.Munmap(w.mapping)
		w.mapping = nil
	}
}
