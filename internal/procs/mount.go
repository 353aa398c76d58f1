package procs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// MountUsers lists the processes using the mount on dir (as this process
// sees it). A bind mount of the same directory of the same filesystem in
// another mount namespace (a container's `-v DIR:/models`) counts as the
// mount: an unmount propagates into it. A process of any namespace uses
// the mount when its working directory, root, or a file it has open or
// mapped is on it; a container given the directory under another path
// (not a copy propagated into a namespace that mounts a directory above it,
// such as a host agent's hostPath /), with no process using a file on it,
// is named by its first process: an unmount would empty its directory. Files are matched by mount id (statx
// STATX_MNT_ID, Linux 5.8), so a process that uses the same files through
// another mount (the store's, a weight snapshot's) is not a user.
func MountUsers(dir string) ([]Holder, error) {
	own, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("mounts of %s: %w", dir, err)
	}
	if len(own) == 0 {
		return nil, fmt.Errorf("%s is not a mount point", dir)
	}
	view := own[len(own)-1] // the topmost
	self, _ := os.Readlink("/proc/self/ns/mnt")

	all := pids()
	slices.Sort(all)
	nsOf := map[int]string{}
	mounted := map[string]bool{} // mount namespaces, by name, with a view of the mount
	read := map[string]bool{}    // mount namespaces whose mount table was read
	ids := map[uint64]bool{}     // the views' mount ids, in every namespace
	for _, pid := range all {
		ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"))
		if err != nil {
			continue
		}
		nsOf[pid] = ns
		if read[ns] {
			continue
		}
		ms, err := pidMounts(pid)
		if err != nil {
			continue // gone: the namespace's next process is read instead
		}
		read[ns] = true
		for _, m := range ms {
			if sameView(m, view) {
				ids[uint64(m.ID)] = true
				mounted[ns] = mounted[ns] || boundElsewhere(m, dir)
			}
		}
	}

	var out []Holder
	named := map[string]bool{} // namespaces with a process named
	for _, pid := range all {
		if ns, ok := nsOf[pid]; ok && usesMount(pid, ids) {
			out = append(out, Describe(pid))
			named[ns] = true
		}
	}
	for _, pid := range all {
		ns, ok := nsOf[pid]
		if !ok || ns == self || !mounted[ns] || named[ns] {
			continue
		}
		if h := Describe(pid); h.Container != "" {
			out = append(out, h)
			named[ns] = true
		}
	}
	return out, nil
}

// pidMounts is the mount table of process pid's mount namespace.
func pidMounts(pid int) ([]*mountinfo.Info, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, nil)
}

// sameView says whether m shows the directory (or one below it) that view
// mounts, of the same filesystem.
func sameView(m, view *mountinfo.Info) bool {
	return m.Major == view.Major && m.Minor == view.Minor &&
		(m.Root == view.Root || strings.HasPrefix(m.Root, strings.TrimSuffix(view.Root, "/")+"/"))
}

// boundElsewhere says whether m, a view of the mount on dir, is a bind
// under another path (a container's /models), not the mount itself or its
// copy where a namespace mounts a directory above dir (/host/DIR).
func boundElsewhere(m *mountinfo.Info, dir string) bool {
	return !strings.HasSuffix(m.Mountpoint, dir)
}

// usesMount says whether a process's working directory, root, or one of
// its open or mapped files is on one of the mounts ids.
func usesMount(pid int, ids map[uint64]bool) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	on := func(path string) bool {
		stx, ok := statx(path, unix.STATX_MNT_ID)
		return ok && stx.Mask&unix.STATX_MNT_ID != 0 && ids[stx.Mnt_id]
	}
	if on(filepath.Join(dir, "cwd")) || on(filepath.Join(dir, "root")) {
		return true
	}
	fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
	for _, fd := range fds {
		if on(filepath.Join(dir, "fd", fd.Name())) {
			return true
		}
	}
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		return false
	}
	defer f.Close()
	seen := map[Inode]bool{} // a file's ranges share its mount: one look each
	for _, m := range parseMaps(bufio.NewScanner(f)) {
		if !seen[m.Inode] {
			seen[m.Inode] = true
			if on(filepath.Join(dir, "map_files", m.Range)) {
				return true
			}
		}
	}
	return false
}
