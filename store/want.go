package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// Want marks id as wanted on this node until release is called or the
// process exits: a resolve holds it while it looks for a source among the
// weight peers, and the node's peer lists it (Wants), so that a node ranked
// below this one for id waits for it rather than take the origin. Many
// processes hold it at once: it is a shared flock on id's want lock file,
// which the last holder to release it removes.
func (d *Domain) Want(id artifact.ID) (release func(), err error) {
	path := d.lockPath(id, "want")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("want %s: %w", id.Short(), err)
		}
		// Blocking: the only exclusive holders are a release's or Wants'
		// removal, each held for an instant.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			f.Close()
			return nil, fmt.Errorf("want %s: flock %s: %w", id.Short(), path, err)
		}
		// A removal between the open and the flock leaves this file
		// nameless: the lock must be on the one at the path.
		if atPath(path, f) {
			var once sync.Once
			return func() { once.Do(func() { removeUnwanted(path, f) }) }, nil
		}
		f.Close()
	}
}

// Wants are the ids that a process of this node wants now (Want). A want
// lock file nobody holds (its holder died) is removed.
func (d *Domain) Wants() []artifact.ID {
	const suffix = ".want.lock"
	matches, _ := filepath.Glob(d.path(dirLocks, "*"+suffix))
	out := []artifact.ID{}
	for _, m := range matches {
		id, err := artifact.ParseIDHex(strings.TrimSuffix(filepath.Base(m), suffix))
		if err != nil {
			continue
		}
		f, err := os.OpenFile(m, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if ok, err := flockNB(f, unix.LOCK_SH); err != nil || !ok {
			f.Close()
			continue // an instant's removal
		}
		if !removeUnwanted(m, f) {
			out = append(out, id)
		}
	}
	return out
}

// removeUnwanted removes the want lock file at path, which f holds shared,
// when no other process holds it, closes f, and says whether it removed
// it. The exclusive lock that tells replaces f's shared one.
func removeUnwanted(path string, f *os.File) (removed bool) {
	if ok, _ := flockNB(f, unix.LOCK_EX); ok && atPath(path, f) {
		removed = os.Remove(path) == nil
	}
	f.Close()
	return removed
}

// atPath says whether f is the file at path.
func atPath(path string, f *os.File) bool {
	var a, b unix.Stat_t
	return unix.Fstat(int(f.Fd()), &a) == nil && unix.Stat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}
