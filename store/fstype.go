package store

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Filesystems the store accepts, by statfs magic.
var supportedFS = map[int64]string{
	unix.EXT4_SUPER_MAGIC:  "ext4",
	unix.XFS_SUPER_MAGIC:   "xfs",
	unix.BTRFS_SUPER_MAGIC: "btrfs",
	unix.TMPFS_MAGIC:       "tmpfs",
}

// Names of filesystems the store refuses, so the error can name them.
var knownFS = map[int64]string{
	unix.NFS_SUPER_MAGIC:       "nfs",
	unix.FUSE_SUPER_MAGIC:      "fuse",
	unix.PROC_SUPER_MAGIC:      "proc",
	unix.SYSFS_MAGIC:           "sysfs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlay",
	unix.SMB_SUPER_MAGIC:       "smb",
	unix.CIFS_SUPER_MAGIC:      "cifs",
	unix.SMB2_SUPER_MAGIC:      "smb2",
	unix.SQUASHFS_MAGIC:        "squashfs",
	unix.CGROUP2_SUPER_MAGIC:   "cgroup2",
	unix.RAMFS_MAGIC:           "ramfs",
	unix.DEVPTS_SUPER_MAGIC:    "devpts",
	unix.EROFS_SUPER_MAGIC_V1:  "erofs",
	unix.V9FS_MAGIC:            "9p",
	0x0BD00BD0:                 "lustre",
	0x47504653:                 "gpfs",
	0xA501FCF5:                 "vxfs",
}

// fsName names a statfs magic.
func fsName(magic int64) string {
	if n, ok := supportedFS[magic]; ok {
		return n
	}
	if n, ok := knownFS[magic]; ok {
		return n
	}
	return fmt.Sprintf("unknown filesystem 0x%x", magic)
}

// checkFilesystem returns the type of the filesystem holding dir, or an
// *UnsupportedFSError naming it when the store cannot be kept there.
func checkFilesystem(dir string) (string, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	magic := int64(st.Type)
	name, ok := supportedFS[magic]
	if !ok {
		if name, ok = testFilesystem(dir, magic); !ok {
			return "", magic, &UnsupportedFSError{Root: dir, Type: fsName(magic), Magic: magic}
		}
	}
	return name, magic, nil
}
