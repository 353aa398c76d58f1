package store

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// inodeKey names one inode of the store's filesystem.
type inodeKey struct{ dev, ino uint64 }

// spaceUsage is what a tree's regular files occupy, each inode counted
// once however many names link it.
type spaceUsage struct {
	Bytes int64 // apparent size of the distinct inodes
	// Frees is the part of Bytes whose every link is inside the tree:
	// what removing the tree gives back. A file that a weight snapshot or
	// a host mount's view also links keeps its bytes after the removal.
	Frees int64
}

// treeUsage measures the regular files below dir; seen (may be nil)
// collects the inodes met, so several trees sum without double counting.
func treeUsage(dir string, seen map[inodeKey]bool) spaceUsage {
	var u spaceUsage
	links := map[inodeKey]uint64{}
	sizes := map[inodeKey]int64{}
	nlink := map[inodeKey]uint64{}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		k := inodeKey{uint64(st.Dev), st.Ino}
		links[k]++
		sizes[k], nlink[k] = st.Size, uint64(st.Nlink)
		return nil
	})
	for k, n := range links {
		if seen != nil {
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		u.Bytes += sizes[k]
		if n >= nlink[k] {
			u.Frees += sizes[k]
		}
	}
	return u
}

// UsedBytes is what the published artifacts and temp builds take, each inode once.
// A weight snapshot's links to the store's files add nothing.
func (d *Domain) UsedBytes() int64 {
	seen := map[inodeKey]bool{}
	return treeUsage(d.path(dirArtifacts), seen).Bytes + treeUsage(d.path(dirTmp), seen).Bytes
}

// FilesystemSpace is the size of the store's filesystem and the bytes free to a build.
// Free is what an unprivileged writer may take.
func (d *Domain) FilesystemSpace() (total, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.root, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", d.root, err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// StoreBytes is the store's bytes by state, each inode once.
type StoreBytes struct {
	Ready       int64 `json:"ready"`  // READY artifacts (pinned and leased among them)
	Pinned      int64 `json:"pinned"` // of Ready: pinned
	Leased      int64 `json:"leased"` // of Ready: leased
	Temp        int64 `json:"temp"`   // builds in progress, tombstones
	Quarantined int64 `json:"quarantined"`
	Denied      int64 `json:"denied"` // denied, or without the hardened mode
	Free        int64 `json:"free"`   // free on the filesystem
}

// Bytes measures the store by state.
func (d *Domain) Bytes(ctx context.Context) (*StoreBytes, error) {
	ids, err := d.ids()
	if err != nil {
		return nil, err
	}
	s := &StoreBytes{}
	seen := map[inodeKey]bool{}
	for _, id := range ids {
		u := d.UseOf(id)
		n := treeUsage(d.path(dirArtifacts, id.Hex()), seen).Bytes
		switch {
		case d.unready(id) != "":
			s.Denied += n
		default:
			s.Ready += n
			if u.Pinned() {
				s.Pinned += n
			}
			if u.Leased {
				s.Leased += n
			}
		}
	}
	s.Temp = treeUsage(d.path(dirTmp), seen).Bytes
	entries, _ := os.ReadDir(d.path(dirArtifacts))
	for _, e := range entries {
		if _, tomb := tombstoneOwner(e.Name()); tomb {
			s.Temp += treeUsage(d.path(dirArtifacts, e.Name()), seen).Bytes
		}
	}
	s.Quarantined = treeUsage(d.path(dirQuarantine), seen).Bytes
	_, s.Free, err = d.FilesystemSpace()
	return s, err
}

// FSUsage is the filesystem that holds the store, as the CRI's
// ImageFsInfo names it: its mountpoint, and the bytes and inodes the store
// and the given directories (weightsnapd's snapshots) use, each inode once.
type FSUsage struct {
	Mountpoint string
	UsedBytes  int64
	InodesUsed int64
}

// FSUsage measures the store and dirs on the store's filesystem.
func (d *Domain) FSUsage(dirs ...string) (*FSUsage, error) {
	mp, err := mountpoint(d.root)
	if err != nil {
		return nil, err
	}
	seen := map[inodeKey]bool{}
	u := &FSUsage{Mountpoint: mp}
	for _, dir := range append([]string{d.path(dirArtifacts), d.path(dirTmp), d.path(dirQuarantine)}, dirs...) {
		u.UsedBytes += treeUsage(dir, seen).Bytes
	}
	u.InodesUsed = int64(len(seen))
	return u, nil
}

// mountpoint is the top directory of path's filesystem: the last parent on
// the same device.
func mountpoint(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	for {
		parent := filepath.Dir(path)
		var pst unix.Stat_t
		if parent == path || unix.Stat(parent, &pst) != nil || pst.Dev != st.Dev {
			return path, nil
		}
		path = parent
	}
}
