//go:build powercut

package store

import (
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// powercutFSType is the mount type of test/powercut's FUSE filesystem.
const powercutFSType = "fuse.powercut"

// testFilesystem admits, in test binaries built with the "powercut" tag
// only, the power-cut test filesystem: a FUSE mount of type fuse.powercut,
// and no other FUSE filesystem.
func testFilesystem(dir string, magic int64) (string, bool) {
	if magic != unix.FUSE_SUPER_MAGIC {
		return "", false
	}
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false
	}
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(dir))
	if err != nil || len(mounts) == 0 {
		return "", false
	}
	nearest := mounts[0] // the mount holding dir: the longest mount point, the last mounted
	for _, m := range mounts[1:] {
		if len(m.Mountpoint) >= len(nearest.Mountpoint) {
			nearest = m
		}
	}
	return powercutFSType, nearest.FSType == powercutFSType
}
