package snapshotter

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// linkPool is a folder of symbolic links, one for each target (named by
// the target's sha256), that views hardlink rather than each making
// symlinks of their own. A new symlink is a new inode and, for a target
// longer than ext4 keeps in the inode (a hub cache's ../../blobs/<64 hex>
// is), a block of its own; a hard link to a pooled one is a directory
// entry, and removing the view frees nothing but entries. Sharing is safe:
// a symlink's target cannot change in place, and the pool's entries are
// replaced only whole (a new link renamed over the old; views keep the old
// inode). The pool is in the snapshotter's root, on the store's
// filesystem, 0700, and only its snapshotter writes it. An entry no view
// links any more (one link left: the pool's), or one that is not a
// symlink to the target its name says, is removed by sweep, at start and
// at Cleanup, so that a view's link trusts an entry by its name.
type linkPool struct {
	dir string
	seq atomic.Uint64 // names temporary links
}

// linkPoolTemp prefixes a pool entry being made.
const linkPoolTemp = ".new-"

func newLinkPool(dir string) (*linkPool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshotter: link pool: %w", err)
	}
	return &linkPool{dir: dir}, nil
}

// open opens the pool's folder, as the dirfd of symlink.
func (p *linkPool) open() (int, error) {
	fd, err := unix.Open(p.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("link pool: %w", &os.PathError{Op: "open", Path: p.dir, Err: err})
	}
	return fd, nil
}

// symlink puts at name in the directory open at dirfd a symbolic link to
// target, as unix.Symlinkat does (an error satisfying os.ErrExist when
// something is there already): a hard link to the pool's entry for
// target, that entry made, or made again when it is missing or has as
// many links as the filesystem allows. pool is the pool's folder (open).
// The entry's target is not read: sweep keeps only entries true to their
// names. Where the pool cannot be linked from dirfd (another filesystem)
// it makes a symlink of its own.
func (p *linkPool) symlink(pool int, target string, dirfd int, name string) error {
	entry := p.entry(target)
	for range 3 {
		// flags 0: the link is to the symlink itself, not what it names.
		err := unix.Linkat(pool, entry, dirfd, name, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EEXIST):
			return &os.LinkError{Op: "symlink", Old: target, New: name, Err: err}
		case errors.Is(err, unix.EXDEV):
			return unix.Symlinkat(target, dirfd, name)
		case errors.Is(err, unix.EMLINK), errors.Is(err, unix.ENOENT):
			// ENOENT: the entry is missing (new, or a sweep took it), or
			// the directory at dirfd was removed: the next pass tells, the
			// entry made.
			if err := p.put(entry, target); err != nil {
				return err
			}
		default:
			return &os.LinkError{Op: "link", Old: filepath.Join(p.dir, entry), New: name, Err: err}
		}
	}
	return unix.Symlinkat(target, dirfd, name)
}

// entry is the pool's name for a symlink to target.
func (p *linkPool) entry(target string) string {
	sum := sha256.Sum256([]byte(target))
	return hex.EncodeToString(sum[:])
}

// put makes the pool's entry a new symbolic link to target: made at a
// temporary name, renamed over whatever entry is.
func (p *linkPool) put(entry, target string) error {
	tmp := filepath.Join(p.dir, linkPoolTemp+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(p.seq.Add(1), 10))
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("link pool: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(p.dir, entry)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link pool: %w", err)
	}
	return nil
}

// sweep removes the entries no view links, those that are not a symlink
// to the target their name says, and the temporary links a crash left
// behind. A view being built meanwhile either linked an entry first (its
// link keeps the inode) or finds it gone and makes it again.
func (p *linkPool) sweep() error {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return fmt.Errorf("link pool: %w", err)
	}
	var errs []error
	for _, e := range ents {
		name := filepath.Join(p.dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(name, &st); err != nil {
			continue // gone already
		}
		// A temporary link a live put is about to rename is one of this
		// process's: only those of other processes (crashed) go.
		if strings.HasPrefix(e.Name(), linkPoolTemp+strconv.Itoa(os.Getpid())+"-") || st.Nlink > 1 && p.trueToName(e.Name()) {
			continue
		}
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("link pool: %w", err)
	}
	return nil
}

// trueToName reports whether the pool's entry name is a symlink to the
// target whose pool name it has.
func (p *linkPool) trueToName(name string) bool {
	target, err := os.Readlink(filepath.Join(p.dir, name))
	return err == nil && p.entry(target) == name
}
