package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/dirfd"
	"github.com/weightsnap/weightsnap/internal/fanout"
	"github.com/weightsnap/weightsnap/layout/hfcache"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// snapshotDir is the directory that holds an active snapshot's own files,
// read from its mounts: the overlay's upperdir, or the bind source of a
// snapshot without a parent. Files must be written there, not through an
// overlay mount: a hardlink made through overlayfs into the store fails
// with EXDEV.
func snapshotDir(mounts []mount.Mount) (string, error) {
	if len(mounts) == 1 {
		m := mounts[0]
		switch m.Type {
		case "bind":
			return m.Source, nil
		case "overlay":
			for _, o := range m.Options {
				if dir, ok := strings.CutPrefix(o, "upperdir="); ok {
					return dir, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no snapshot directory in the overlay snapshotter's mounts %v: %w", mounts, errdefs.ErrNotImplemented)
}

// committedDir is the directory that holds a committed snapshot's own
// files, read from the mounts of a short-lived view of it: the bind source
// of a view of one layer, the first lowerdir of a view of several.
func committedDir(ctx context.Context, sn snapshots.Snapshotter, name string) (string, error) {
	key := fmt.Sprintf("%s %d %s", tmpRepair, time.Now().UnixNano(), name)
	mounts, err := sn.View(ctx, key, name)
	if err != nil {
		return "", err
	}
	if err := sn.Remove(context.WithoutCancel(ctx), key); err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).WithError(err).WithField("key", key).Warn("remove a view made to find a snapshot's directory")
	}
	if len(mounts) == 1 {
		switch m := mounts[0]; m.Type {
		case "bind":
			return m.Source, nil
		case "overlay":
			for _, o := range m.Options {
				if lower, ok := strings.CutPrefix(o, "lowerdir="); ok {
					return strings.Split(lower, ":")[0], nil // the top layer: the snapshot itself
				}
			}
		}
	}
	return "", fmt.Errorf("no snapshot directory in the mounts of a view of %s %v: %w", name, mounts, errdefs.ErrNotImplemented)
}

// buildView puts the artifact in the directory root (created as needed),
// the pointer's view directory (pointer.ViewDir): its files as the artifact
// has them, or, for pointer.LayoutHF, as a Hugging Face cache repository
// folder (layout/hfcache: blobs/ of the store's inodes, snapshots/ of
// relative links into them, refs/main) of the pointer's repo id and the
// artifact's revision. Every payload file is a hardlink to the store's
// inode, checked once linked (store.Linker), and the pointer
// file the pointer layer holds is at .weightsnap/pointers/, with the
// artifact's file count and size; the layer's notice file
// (pointer.NoticeName) is not there. The hub cache's symlinks are hard
// links to pool's (linkpool.go); with no pool, symlinks of their own.
// Directories are 0755; files keep the store's read-only mode and owner.
// It is idempotent: a file that is already the store's inode stays, anything
// else at a file's path is replaced, so it also fills a directory where the
// pointer layer was unpacked.
func buildView(ctx context.Context, root string, ptr pointer.Pointer, l *store.Lease, pool *linkPool) error {
	// The pointer layer's notice says the weights are not mounted: once they
	// are, it goes (an artifact file of that name is linked below).
	if err := os.Remove(filepath.Join(root, pointer.NoticeName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("view: remove %s: %w", pointer.NoticeName, err)
	}
	linker, err := l.Linker(ctx)
	if err != nil {
		return fmt.Errorf("view of %s: %w", l.ID, err)
	}
	defer linker.Close()
	files := l.Index.Files
	link := func(dirfd int, name string, i int) error { return linker.Link(ctx, i, dirfd, name) }
	dirs := dirfd.New()
	defer dirs.Close()
	switch ptr.Layout {
	case "":
		if err := linkAll(dirs, root, files, link); err != nil {
			return err
		}
	case pointer.LayoutHF:
		hf := make([]hfcache.File, len(files))
		for i, f := range files {
			hf[i] = hfcache.File{Path: f.Path, SHA256: f.SHA256}
		}
		tree, err := hfcache.New(ptr.Repo, l.Identity().Model.Revision, hf)
		if err != nil {
			return fmt.Errorf("view of %s: %w", l.ID, err)
		}
		var mk hfcache.MakeSymlink
		if pool != nil {
			pfd, err := pool.open()
			if err != nil {
				return fmt.Errorf("view of %s: %w", l.ID, err)
			}
			defer unix.Close(pfd)
			mk = func(target string, dirfd int, name string) error { return pool.symlink(pfd, target, dirfd, name) }
		}
		if err := tree.Write(root, link, mk); err != nil {
			return fmt.Errorf("view of %s: %w", l.ID, err)
		}
	default: // pointers are parsed with pointer.CheckLayout
		return fmt.Errorf("view of %s: layout %q: %w", l.ID, ptr.Layout, errdefs.ErrInvalidArgument)
	}
	ptr.Files, ptr.Bytes = len(files), l.Index.TotalBytes()
	body, err := pointer.File(ptr)
	if err != nil {
		return err
	}
	pf := filepath.Join(root, pointer.Dir, ptr.ID.Hex()+".json")
	if err := os.MkdirAll(filepath.Dir(pf), 0o755); err != nil {
		return err
	}
	if err := artifact.WriteFileAtomic(pf, body, 0o444, artifact.Volatile); err != nil {
		return fmt.Errorf("view: pointer file: %w", err)
	}
	return nil
}

// linkAll links files under root (each at its index path, a validated
// relative path) with link, its directories made and opened first (in
// dirs), then the links by a few goroutines (internal/fanout) over
// consecutive runs of files, so that each mostly links into folders of its
// own. Each file is its own link, so a model of many small files costs as
// many links.
func linkAll(dirs *dirfd.Set, root string, files []artifact.FileEntry, link func(dirfd int, name string, i int) error) error {
	at := make([]int, len(files))
	for i, f := range files {
		fd, err := dirs.Open(filepath.Dir(filepath.Join(root, f.Path)))
		if err != nil {
			return fmt.Errorf("view of %s: %w", f.Path, err)
		}
		at[i] = fd
	}
	return fanout.Each(len(files), func(i int) error {
		if err := link(at[i], filepath.Base(files[i].Path), i); err != nil {
			return fmt.Errorf("view of %s: %w", files[i].Path, err)
		}
		return nil
	})
}

// sameFilesystem checks that views under root can be hardlinks to the
// store's files: one device, and a link from the store into root works.
// The error names both paths.
func sameFilesystem(root, storeRoot string) error {
	refuse := func(why string) error {
		return fmt.Errorf("snapshot root %s and store %s are not on one filesystem (%s): views are hardlinks to the store's files; put [snapshotter] root on the store's filesystem: %w",
			root, storeRoot, why, errdefs.ErrFailedPrecondition)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("snapshot root: %w", err)
	}
	var a, b unix.Stat_t
	if err := unix.Stat(root, &a); err != nil {
		return fmt.Errorf("snapshot root: %w", err)
	}
	if err := unix.Stat(filepath.Join(storeRoot, "artifacts"), &b); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if a.Dev != b.Dev {
		return refuse(fmt.Sprintf("devices %d:%d and %d:%d", unix.Major(a.Dev), unix.Minor(a.Dev), unix.Major(b.Dev), unix.Minor(b.Dev)))
	}
	// One device can still be two mounts (a bind mount), across which links fail.
	probe := filepath.Join(root, ".link-probe-"+strconv.Itoa(os.Getpid()))
	os.Remove(probe)
	err := os.Link(filepath.Join(storeRoot, "domain.json"), probe)
	os.Remove(probe)
	if errors.Is(err, unix.EXDEV) {
		return refuse("a hardlink between them fails with EXDEV")
	}
	if err != nil {
		return fmt.Errorf("snapshot root %s: link probe from the store %s: %w", root, storeRoot, err)
	}
	return nil
}
