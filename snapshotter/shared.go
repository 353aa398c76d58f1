package snapshotter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// sharedViews is the folder of the views weight snapshots share
// (Root/views): one for each artifact and pointer, built once by
// buildView, so that the weight snapshot of another chain (another image
// of the same weights, another base) is a symbolic link to it, its own
// directory replaced by the link (overlayfs follows it in lowerdir, a
// bind mount in its source): its Prepare makes no directory and no
// hardlink, however many files the model has. A view is
// <artifact hex>/<key>/fs, with origin beside fs, the device and inode
// of the artifact's first file when it was built: a view of an artifact
// the store removed and fetched again (new inodes) is built again, never
// served. Views are built in a temporary folder and renamed into place
// (exchanged with the view they replace), so one is whole or absent;
// temporary and replaced ones a crash left are removed at start. Release
// removes an artifact's views with its weight snapshots' links (the
// store's eviction), Cleanup those no snapshot names (LabelView).
type sharedViews struct {
	dir string
	seq atomic.Uint64 // names temporary folders
}

// Prefixes of the folders being made (sharedTemp) and being removed
// (sharedOld), beside the views; both are removed at start.
const (
	sharedTemp = ".new-"
	sharedOld  = ".old-"
)

// newSharedViews opens the views under dir (made 0700), removing what a
// crash left half made or half removed.
func newSharedViews(dir string) (*sharedViews, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshotter: shared views: %w", err)
	}
	v := &sharedViews{dir: dir}
	arts, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshotter: shared views: %w", err)
	}
	var errs []error
	for _, a := range arts {
		if isShadow(a.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, a.Name())))
			continue
		}
		keys, err := os.ReadDir(filepath.Join(dir, a.Name()))
		errs = append(errs, err)
		for _, k := range keys {
			if isShadow(k.Name()) {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, a.Name(), k.Name())))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("snapshotter: shared views: %w", err)
	}
	return v, nil
}

func isShadow(name string) bool {
	return strings.HasPrefix(name, sharedTemp) || strings.HasPrefix(name, sharedOld)
}

// viewKey names the view of ptr: its pointer file's sha256, since the
// view is the artifact laid out by the pointer (target, layout, repo) with
// that file in it.
func viewKey(ptr pointer.Pointer) (string, error) {
	body, err := pointer.File(ptr)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// viewName is the LabelView value of the view of ptr for the artifact id.
func viewName(id artifact.ID, ptr pointer.Pointer) (string, error) {
	key, err := viewKey(ptr)
	if err != nil {
		return "", err
	}
	return id.Hex() + "/" + key, nil
}

// get is the directory of the shared view of the lease l's artifact laid
// out by ptr (its LabelView name), built first when there is none or it
// is of other inodes. Its callers serialize it (fillMu).
func (v *sharedViews) get(ctx context.Context, ptr pointer.Pointer, l *store.Lease, pool *linkPool) (fs, name string, err error) {
	name, err = viewName(l.ID, ptr)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(v.dir, filepath.FromSlash(name))
	origin, err := leaseOrigin(ctx, l)
	if err != nil {
		return "", "", err
	}
	if have, err := os.ReadFile(filepath.Join(dir, "origin")); err == nil && string(have) == origin {
		return filepath.Join(dir, "fs"), name, nil
	}
	tmp := v.shadow(dir, sharedTemp) // unique in this process; a crash's are removed at start
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.MkdirAll(filepath.Join(tmp, "fs"), 0o755); err != nil {
		return "", "", fmt.Errorf("shared view: %w", err)
	}
	if err := buildView(ctx, filepath.Join(tmp, "fs", pointer.ViewDir(ptr)), ptr, l, pool); err != nil { // the target is absolute and clean, an hf repo folder one validated name: it stays under fs
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "origin"), []byte(origin), 0o444); err != nil {
		return "", "", fmt.Errorf("shared view: %w", err)
	}
	if err := replaceDir(tmp, dir); err != nil { // another copy's view, which snapshots may link to: exchanged, never missing
		return "", "", fmt.Errorf("shared view: %w", err)
	}
	done = true
	return filepath.Join(dir, "fs"), name, nil
}

// leaseOrigin is the device and inode of the lease's first file ("" for
// an artifact of no files): what its shared views link to.
func leaseOrigin(ctx context.Context, l *store.Lease) (string, error) {
	if len(l.Index.Files) == 0 {
		return "", nil
	}
	f, err := l.File(ctx, 0)
	if err != nil {
		return "", fmt.Errorf("shared view: %w", err)
	}
	fd, err := f.FD()
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("shared view: %w", err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}

// remove removes the views of the artifact id.
func (v *sharedViews) remove(id artifact.ID) error {
	return v.removeDir(filepath.Join(v.dir, id.Hex()))
}

// removeDir removes dir (a view, or an artifact's views) by a rename
// first, so that nothing ever sees it half removed.
func (v *sharedViews) removeDir(dir string) error {
	old := v.shadow(dir, sharedOld)
	if err := os.Rename(dir, old); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("shared view: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("shared view: %w", err)
	}
	return nil
}

// shadow is a new name beside dir for a folder being made (sharedTemp) or
// removed (sharedOld).
func (v *sharedViews) shadow(dir, prefix string) string {
	return filepath.Join(filepath.Dir(dir), prefix+strconv.FormatUint(v.seq.Add(1), 10)+"-"+strconv.Itoa(os.Getpid()))
}

// sweep removes the views whose names keep does not hold, and then the
// artifact folders left empty.
func (v *sharedViews) sweep(keep map[string]bool) error {
	arts, err := os.ReadDir(v.dir)
	if err != nil {
		return fmt.Errorf("shared views: %w", err)
	}
	var errs []error
	for _, a := range arts {
		if isShadow(a.Name()) || !a.IsDir() {
			continue
		}
		keys, err := os.ReadDir(filepath.Join(v.dir, a.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		left := 0
		for _, k := range keys {
			if isShadow(k.Name()) || keep[a.Name()+"/"+k.Name()] {
				left++
				continue
			}
			errs = append(errs, v.removeDir(filepath.Join(v.dir, a.Name(), k.Name())))
		}
		if left == 0 {
			if err := os.Remove(filepath.Join(v.dir, a.Name())); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// replaceDir puts what is at tmp (a link to a view, an empty directory,
// a view) at dir, the directory of a committed snapshot or a view, and
// removes what was there: by one exchange (RENAME_EXCHANGE), so that dir
// is never missing (the overlay snapshotter's mounts of anything over it
// stat it); on a filesystem without the exchange, by a removal and a
// rename, which a crash can cut between (the snapshot's views then fail
// until it is removed).
func replaceDir(tmp, dir string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	switch {
	case errors.Is(err, unix.ENOENT): // nothing at dir
		return os.Rename(tmp, dir)
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		return os.Rename(tmp, dir)
	case err != nil:
		return err
	}
	return os.RemoveAll(tmp) // what dir was
}

// swapIn replaces the committed snapshot's directory dir (replaceDir) by
// what make makes at dir+suffix, first removing what a crash left there.
func swapIn(dir, suffix string, make func(tmp string) error) error {
	tmp := dir + suffix
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := make(tmp); err != nil {
		return err
	}
	return replaceDir(tmp, dir)
}
