// Package dirfd makes and opens the directories of a tree being written,
// each once, so that its entries are made by name in an open directory
// and no call walks the tree's paths again.
package dirfd

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Set is the directories of one tree being written, each made and opened
// once, by path.
type Set struct {
	fds map[string]int // O_PATH descriptors, by path
}

// New returns an empty set; Close closes what it opened.
func New() *Set { return &Set{fds: map[string]int{}} }

// Open makes dir (with its parents, mode 0755) unless it exists, and
// returns its O_PATH descriptor, the same for every call with dir. It is
// not safe for concurrent use; the descriptors it returns are.
func (s *Set) Open(dir string) (int, error) {
	if fd, ok := s.fds[dir]; ok {
		return fd, nil
	}
	// A new tree's directory is one mkdir away; its parents are made by
	// MkdirAll only when one is missing.
	err := unix.Mkdir(dir, 0o755)
	if errors.Is(err, unix.ENOENT) {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	s.fds[dir] = fd
	return fd, nil
}

// Close closes the directories the set opened.
func (s *Set) Close() {
	for dir, fd := range s.fds {
		unix.Close(fd)
		delete(s.fds, dir)
	}
}
