package store

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// Linker makes hard links to a lease's payload files by their names in the artifact directory.
//
// It opens no payload file but a safetensors file, whose tensor table it
// checks: a view of many files costs a link and a stat for each. Each link
// is checked as a lookup checks an open payload file (type, mode, size,
// tensor table) once it is made, so the view holds the very inode it
// checked. The artifact directory and its folders are opened beneath it,
// without following a link, when the Linker is made.
type Linker struct {
	l    *Lease
	dirs map[string]int // "." and each payload file's folder, open
}

// Linker opens the lease's artifact directory, the one it validated, and
// the folders of its payload files, for Link. A directory that is not
// the one validated, or a folder that is not one (a link, missing),
// denies the artifact. The caller closes it.
func (l *Lease) Linker(ctx context.Context) (*Linker, error) {
	if l.o == nil {
		return nil, fmt.Errorf("artifact %s: lease closed", l.ID.Short())
	}
	k := &Linker{l: l, dirs: map[string]int{}}
	fail := func(err error) (*Linker, error) {
		k.Close()
		return nil, l.found(ctx, err)
	}
	root, err := unix.Open(l.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(readFailure(l.ID, "", fmt.Errorf("open artifact directory: %w", err)))
	}
	k.dirs["."] = root
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return fail(readFailure(l.ID, "", err))
	}
	if st.Ino != l.o.ino {
		return fail(&InvalidError{ID: l.ID, Reason: "the artifact directory is not the one its lease validated"})
	}
	for _, e := range l.Index.Files {
		dir := path.Dir(e.Path)
		if _, ok := k.dirs[dir]; ok {
			continue
		}
		fd, err := openBeneath(root, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if err != nil {
			return fail(readFailure(l.ID, dir, fmt.Errorf("open folder: %w", err)))
		}
		k.dirs[dir] = fd
	}
	return k, nil
}

// Close closes the folders the Linker opened.
func (k *Linker) Close() {
	for _, fd := range k.dirs {
		unix.Close(fd)
	}
	k.dirs = nil
}

// Link makes name in the directory open at dirfd a hard link to payload
// file i, keeping one that is that inode already and replacing anything
// else there, and checks what it linked. A payload file that fails the
// check denies the artifact and its link goes. It is safe for concurrent
// use.
func (k *Linker) Link(ctx context.Context, i int, dirfd int, name string) error {
	if i < 0 || i >= len(k.l.Index.Files) {
		return fmt.Errorf("file %d of artifact %s of %d files: %w", i, k.l.ID.Short(), len(k.l.Index.Files), errdefs.ErrInvalidArgument)
	}
	e := k.l.Index.Files[i]
	src, base := k.dirs[path.Dir(e.Path)], path.Base(e.Path)
	if err := linkAt(src, base, dirfd, name); err != nil {
		// The source missing or not what it was is the artifact's fault;
		// anything else is the destination's.
		var st unix.Stat_t
		if serr := unix.Fstatat(src, base, &st, unix.AT_SYMLINK_NOFOLLOW); serr != nil {
			return k.l.found(ctx, readFailure(k.l.ID, e.Path, serr))
		}
		return fmt.Errorf("link %s of artifact %s: %w", e.Path, k.l.ID.Short(), err)
	}
	if err := checkLink(dirfd, name, e); err != nil {
		unix.Unlinkat(dirfd, name, 0)
		var ie *InvalidError
		if errors.As(err, &ie) {
			return k.l.found(ctx, ie.with(k.l.ID))
		}
		return k.l.found(ctx, readFailure(k.l.ID, e.Path, err))
	}
	return nil
}

// linkAt makes name in dirfd a hard link to the entry base in src (not
// following it), keeping one that is that inode already; anything else
// at name is replaced, by a link at a temporary name, then a rename.
func linkAt(src int, base string, dirfd int, name string) error {
	// A new view has nothing at name, and the link is all it takes.
	err := unix.Linkat(src, base, dirfd, name, 0)
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	var have, want unix.Stat_t
	if unix.Fstatat(dirfd, name, &have, unix.AT_SYMLINK_NOFOLLOW) == nil && unix.Fstatat(src, base, &want, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		have.Dev == want.Dev && have.Ino == want.Ino {
		return nil
	}
	tmp := name + ".weightsnap-link"
	unix.Unlinkat(dirfd, tmp, 0)
	if err := unix.Linkat(src, base, dirfd, tmp, 0); err != nil {
		return err
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return err
	}
	return nil
}

// checkLink checks name in the directory open at dirfd, a link to the
// payload file e, as a lookup checks the open file: its type, mode and
// size, and a safetensors file's tensor table, read through it.
func checkLink(dirfd int, name string, e artifact.FileEntry) error {
	if !artifact.IsSafetensors(e.Path) {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if err := checkPayloadStat(&st, e); err != nil {
			return err
		}
		return checkTensorTable(nil, e) // not safetensors: no tensors indexed
	}
	at := e
	at.Path = name
	lf, err := openPayload(dirfd, "", at)
	if err != nil {
		return err
	}
	defer lf.File.Close()
	return checkTensorTable(lf.File, e)
}
