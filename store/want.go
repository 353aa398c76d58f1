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
// processes hold it at once: it is a shared flock on id's want lock file.
func (d *Domain) Want(id artifact.ID) (release func(), err error) {
	path := d.lockPath(id, "want")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("want %s: %w", id.Short(), err)
	}
	// Blocking: the only exclusive holders are Wants' probes, each held
	// for an instant.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("want %s: flock %s: %w", id.Short(), path, err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

// Wants are the ids that a process of this node wants now (Want).
func (d *Domain) Wants() []artifact.ID {
	const suffix = ".want.lock"
	matches, _ := filepath.Glob(d.path(dirLocks, "*"+suffix))
	out := []artifact.ID{}
	for _, m := range matches {
		id, err := artifact.ParseIDHex(strings.TrimSuffix(filepath.Base(m), suffix))
		if err != nil {
			continue
		}
		lk, free, err := tryLock(m, unix.LOCK_EX)
		if err != nil {
			continue
		}
		if free {
			lk.Close()
			continue
		}
		out = append(out, id)
	}
	return out
}
