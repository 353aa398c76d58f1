package snapshotter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/internal/procs"
	"github.com/weightsnap/weightsnap/pointer"
	"golang.org/x/sys/unix"
)

// Host mounts: an artifact bind-mounted read-only on a host directory (for
// `nerdctl run -v DIR:/models:ro` and hostPath users), or an overlay over
// it that takes writes (hostmount_writable.go), leased until it is
// unmounted. Each mount has a directory <root>/mounts/<id>/ (id: from the
// mount point's path) holding its record (mount.json) and its view (view/:
// hardlinks to the store's files and the pointer file, as in a weight
// snapshot), which is bind-mounted on the mount point. The record is
// written before the mount is made and removed after it is undone, so a
// restart finds every mount there may be: one whose mount point still shows
// its view keeps (takes again) its lease, any other is forgotten.

// mountHolderPrefix makes a host mount's holder name: the prefix and the
// mount point. Snapshot names never start with it.
const mountHolderPrefix = "mount:"

// HostMounts are the snapshotter's host mounts, which the control API
// serves to the CLI.
//
// Their records are kept in dir (<root>/mounts) and, in memory, in the
// holder table.
type HostMounts struct {
	s      *Snapshotter
	dir    string
	mu     sync.Mutex      // orders the end of a Mount and an Unmount
	making map[string]bool // mount points being mounted
}

var _ control.HostMounts = (*HostMounts)(nil)

func newHostMounts(s *Snapshotter, dir string) *HostMounts {
	return &HostMounts{s: s, dir: dir, making: map[string]bool{}}
}

// HostMounts returns the snapshotter's host mounts.
func (s *Snapshotter) HostMounts() *HostMounts { return s.mounts }

func (m *HostMounts) home(mountPoint string) string {
	sum := sha256.Sum256([]byte(mountPoint))
	return filepath.Join(m.dir, hex.EncodeToString(sum[:8]))
}

// load reads the records, keeps those whose view is still mounted on their
// mount point, and removes the others (their mount is gone: unmounted by
// hand, or the host restarted).
func (m *HostMounts) load(ctx context.Context) ([]control.HostMountInfo, error) {
	ents, err := os.ReadDir(m.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("host mounts: %w", err)
	}
	var live []control.HostMountInfo
	for _, e := range ents {
		home := filepath.Join(m.dir, e.Name())
		raw, err := os.ReadFile(filepath.Join(home, "mount.json"))
		var mi control.HostMountInfo
		if err == nil {
			err = json.Unmarshal(raw, &mi)
		}
		if err == nil && (mi.ID.IsZero() || m.home(mi.Dir) != home) {
			err = fmt.Errorf("record names %q at %q", mi.ID, mi.Dir)
		}
		if err != nil || !shows(mi, home) {
			log.G(ctx).WithError(err).WithField("dir", mi.Dir).WithField("record", home).Info("host mount gone: its record is removed")
			if rerr := os.RemoveAll(home); rerr != nil {
				log.G(ctx).WithError(rerr).WithField("record", home).Warn("remove a host mount's record")
			}
			continue
		}
		m.s.holders.setMount(mi)
		live = append(live, mi)
	}
	return live, nil
}

// sameInode says whether a and b are one directory (a mount point shows
// the root of what is mounted on it).
func sameInode(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// mountPoint checks a requested mount point: an absolute path, resolved
// through symbolic links, outside the snapshot root and the store; create
// makes it when missing.
func (m *HostMounts) mountPoint(dir string, create bool) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("mount point %q is not an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	overlaps := func(p string) error {
		for _, inside := range []string{m.s.root, m.s.store.Root()} {
			if p == inside || strings.HasPrefix(p, inside+"/") || strings.HasPrefix(inside, p+"/") {
				return fmt.Errorf("mount point %s overlaps %s: %w", p, inside, errdefs.ErrInvalidArgument)
			}
		}
		return nil
	}
	if err := overlaps(filepath.Clean(dir)); err != nil {
		return "", err
	}
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("mount point: %w: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) && !create {
		return filepath.Clean(dir), nil // an unmount of a mount point removed by hand
	}
	if err != nil {
		return "", fmt.Errorf("mount point: %w", err)
	}
	return real, overlaps(real)
}

// emptyDir refuses a mount point that is not an empty directory: a mount
// would hide what it holds.
func emptyDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	switch {
	case len(names) > 0:
		return fmt.Errorf("mount point %s is not empty: a mount would hide its files: %w", dir, errdefs.ErrInvalidArgument)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("mount point %s is not a directory (%v): %w", dir, err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Mount bind-mounts a read-only view of an artifact on req.Dir and keeps
// its lease until the unmount.
//
// It resolves the artifact from the store, then the reference given or
// the configured sources, and makes req.Dir when it is missing. With
// layout "hf", req.Dir is a Hugging Face cache root and the view, a
// repository folder, is mounted on req.Dir/models--ORG--NAME. A mount
// point that holds a host mount already is refused.
func (m *HostMounts) Mount(ctx context.Context, req control.HostMountRequest) (*control.HostMountInfo, error) {
	if req.ID.IsZero() {
		return nil, fmt.Errorf("a host mount needs the artifact's ID: %w", errdefs.ErrInvalidArgument)
	}
	if err := pointer.CheckLayout(req.Layout, req.Repo); err != nil {
		return nil, err
	}
	dir, err := m.mountPoint(req.Dir, true)
	if err != nil {
		return nil, err
	}
	ptr := pointer.Pointer{Artifact: req.Artifact, ID: req.ID, Target: dir, Layout: req.Layout, Repo: req.Repo}
	if req.Artifact != "" {
		if ptr, _, err = pointer.ParseLabels(pointer.Labels(ptr)); err != nil {
			return nil, err
		}
	}
	if ptr.Layout != "" {
		// A cache root holds repository folders, each a mount point of its
		// own: several artifacts share one root (one HF_HUB_CACHE).
		folder := pointer.ViewDir(ptr)
		if dir, err = m.mountPoint(folder, true); err != nil {
			return nil, err
		}
		if dir != folder {
			return nil, fmt.Errorf("repository folder %s is a symbolic link (to %s): %w", folder, dir, errdefs.ErrInvalidArgument)
		}
	}
	s := m.s
	m.mu.Lock()
	have, mounted := s.holders.mount(dir)
	if mounted || m.making[dir] {
		m.mu.Unlock()
		return nil, fmt.Errorf("%s is a host mount (of %s) already: unmount it first: %w", dir, have.ID, errdefs.ErrFailedPrecondition)
	}
	m.making[dir] = true // the resolution may take long: other mounts go on meanwhile
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.making, dir)
		m.mu.Unlock()
	}()
	if err := emptyDir(dir); err != nil {
		return nil, err
	}
	start := time.Now()
	h, rep, err := s.leases.acquire(ctx, ptr)
	if err != nil {
		return nil, weightErr(ptr, err)
	}
	defer s.leases.finish(h)
	if rep == nil { // held already: no resolution asked the trust policy
		if err := s.leases.resolver.Trusted(ctx, ptr.ID, ptr.Artifact); err != nil {
			return nil, weightErr(ptr, err)
		}
	}
	home := m.home(dir)
	view := filepath.Join(home, "view")
	mi := control.HostMountInfo{Dir: dir, ID: req.ID, Artifact: req.Artifact, Created: time.Now().UTC(), Leased: true,
		Layout: ptr.Layout, Repo: ptr.Repo, Writable: req.Writable}
	if err := m.make(ctx, home, view, ptr, mi, h); err != nil {
		if rerr := os.RemoveAll(home); rerr != nil {
			log.G(ctx).WithError(rerr).WithField("record", home).Warn("remove a failed host mount's record")
		}
		return nil, err
	}
	m.mu.Lock()
	s.leases.attach(h, mountHolderPrefix+dir) // before an Unmount can see it
	s.holders.setMount(mi)
	m.mu.Unlock()
	source := "held"
	if rep != nil {
		source = rep.Source
	}
	log.G(ctx).WithField("dir", dir).WithField("id", req.ID).WithField("source", source).
		WithField("seconds", time.Since(start).Seconds()).Info("host mount")
	return &mi, nil
}

// make builds the view and the record, then mounts the view read-only on
// the mount point, or, writable, an overlay over it.
func (m *HostMounts) make(ctx context.Context, home, view string, ptr pointer.Pointer, mi control.HostMountInfo, h *held) error {
	if err := os.RemoveAll(home); err != nil { // a record a crash left half made
		return err
	}
	if err := os.MkdirAll(view, 0o755); err != nil {
		return err
	}
	if err := buildView(ctx, view, ptr, h.lease, m.s.links); err != nil {
		return err
	}
	raw, err := json.Marshal(mi)
	if err != nil {
		return err
	}
	if err := artifact.WriteFileAtomic(filepath.Join(home, "mount.json"), raw, 0o644, artifact.Durable); err != nil {
		return err
	}
	if mi.Writable {
		return mountOverlay(home, view, mi.Dir)
	}
	if err := unix.Mount(view, mi.Dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", view, mi.Dir, err)
	}
	if err := unix.Mount("", mi.Dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		unix.Unmount(mi.Dir, 0)
		return fmt.Errorf("make %s read-only: %w", mi.Dir, err)
	}
	return nil
}

// Unmount undoes the host mount on dir and lets its lease go.
//
// A mount in use is refused, and stays, naming the processes using it: a
// process with a file open or mapped, or its working directory, there, in
// this mount namespace or through a container's bind mount of dir. A
// container that has dir bind-mounted under another path uses it too,
// since the unmount would empty it there.
func (m *HostMounts) Unmount(ctx context.Context, dir string) error {
	dir, err := m.mountPoint(dir, false)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mi, ok := m.s.holders.mount(dir)
	if !ok {
		return fmt.Errorf("%s is not a weightsnap host mount: %w", dir, errdefs.ErrNotFound)
	}
	home := m.home(dir)
	if shows(mi, home) {
		if err := inUse(dir); err != nil {
			return err
		}
		if err := unix.Unmount(dir, 0); errors.Is(err, unix.EBUSY) {
			// Used since the scan, or by what a scan cannot see.
			if err := inUse(dir); err != nil {
				return err
			}
			return fmt.Errorf("unmount %s: in use (the kernel says busy; no process found using it): %w", dir, errdefs.ErrFailedPrecondition)
		} else if err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	if err := os.Remove(filepath.Join(home, "mount.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(home); err != nil {
		log.G(ctx).WithError(err).WithField("record", home).Warn("remove an unmounted view")
	}
	if mi.Layout != "" {
		// The repository folder the mount made: left empty in the cache
		// root, a hub reader would take it for a broken repository.
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.G(ctx).WithError(err).WithField("dir", dir).Warn("remove an unmounted repository folder")
		}
	}
	m.s.leases.forget(ctx, mountHolderPrefix+dir) // its record, repair and lease
	log.G(ctx).WithField("dir", dir).Info("host mount undone")
	return nil
}

// inUse refuses the unmount of dir while a process uses the mount, in this
// mount namespace or in a container's, naming each process.
func inUse(dir string) error {
	users, err := procs.MountUsers(dir)
	if err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	if len(users) > 0 {
		return fmt.Errorf("unmount %s: in use by %s: %w", dir, procs.Join(users), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// List lists the host mounts, by mount point.
func (m *HostMounts) List() []control.HostMountInfo { return m.s.holders.mounts() }

// HoldersOf says what holds the artifact id in the snapshotter: snapshots
// and host mounts with its lease, and those waiting for a repair.
func (m *HostMounts) HoldersOf(id artifact.ID) (*control.Holders, error) {
	s := m.s
	out := &control.Holders{ID: id}
	var names []string
	names, out.Leased = s.leases.holdersOf(id)
	for _, n := range names {
		if dir, ok := strings.CutPrefix(n, mountHolderPrefix); ok {
			out.Mounts = append(out.Mounts, dir)
		} else {
			out.Snapshots = append(out.Snapshots, n)
		}
	}
	for _, n := range s.repairs.pending(id) {
		out.Pending = append(out.Pending, strings.TrimPrefix(n, mountHolderPrefix))
	}
	return out, nil
}
