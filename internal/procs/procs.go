// Package procs finds the processes that use files and mounts by scanning
// /proc, and names each one by its PID, command and container.
package procs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// Holder is a process found using a file or a mount.
type Holder struct {
	PID       int    `json:"pid"`
	Command   string `json:"command,omitempty"`   // /proc/PID/comm; "" once the process is gone
	Container string `json:"container,omitempty"` // the 64-hex container id; "" outside a container
}

// String names the holder: "pid N (COMMAND) in container ID[:12]", or
// "pid N (COMMAND)" outside a container.
func (h Holder) String() string {
	s := fmt.Sprintf("pid %d", h.PID)
	if h.Command != "" {
		s += " (" + h.Command + ")"
	}
	if h.Container != "" {
		s += " in container " + h.Container[:min(12, len(h.Container))]
	}
	return s
}

// Join names holders, separated by commas.
func Join(hs []Holder) string {
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.String()
	}
	return strings.Join(names, ", ")
}

// Describe reads a process's command and container. A process that is gone
// is named by its PID alone.
func Describe(pid int) Holder {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	h := Holder{PID: pid}
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		h.Command = strings.TrimSpace(string(comm))
	}
	if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		h.Container = ContainerID(string(cg))
	}
	return h
}

// ContainerID finds the container id in a /proc/PID/cgroup listing: the
// innermost path element that is, or ends in, 64 hexadecimal digits, as
// containerd and nerdctl (cgroupfs: /NAMESPACE/ID; systemd:
// nerdctl-ID.scope), the CRI plugin (cri-containerd-ID.scope, or
// /kubepods/.../podUID/ID) and docker (docker-ID.scope, /docker/ID) name
// a container's cgroup. It is "" outside a container.
func ContainerID(cgroup string) string {
	for line := range strings.Lines(cgroup) {
		// v1: "4:memory:/default/ID"; v2: "0::/system.slice/nerdctl-ID.scope"
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		elems := strings.Split(f[2], "/")
		for i := len(elems) - 1; i >= 0; i-- {
			e := strings.TrimSuffix(elems[i], ".scope")
			if j := strings.LastIndexByte(e, '-'); j >= 0 {
				e = e[j+1:]
			}
			if artifact.IsSHA256Hex(e) { // container ids are written as 64 lower-case hex, as sha256s are
				return e
			}
		}
	}
	return ""
}

// Inode is a file by device and inode number: containers see files through
// bind mounts under other paths, so files are matched by inode, not path.
type Inode struct{ Dev, Ino uint64 }

// pids lists the processes in /proc.
func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// statx reads the cached attributes of a /proc link's target: a file open
// on a hung network or FUSE filesystem must not hang the scan.
func statx(path string, mask int) (unix.Statx_t, bool) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC, mask, &stx)
	return stx, err == nil
}

// OpenInodes maps every regular file some process has open or mapped to one
// such process's PID.
func OpenInodes() map[Inode]int {
	out := map[Inode]int{}
	for _, pid := range pids() {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			stx, ok := statx(filepath.Join(dir, "fd", fd.Name()), unix.STATX_TYPE|unix.STATX_INO)
			if ok && stx.Mode&unix.S_IFMT == unix.S_IFREG {
				out[Inode{unix.Mkdev(stx.Dev_major, stx.Dev_minor), stx.Ino}] = pid
			}
		}
		if f, err := os.Open(filepath.Join(dir, "maps")); err == nil {
			for _, m := range parseMaps(bufio.NewScanner(f)) {
				out[m.Inode] = pid
			}
			f.Close()
		}
	}
	return out
}

// mapping is a file-backed range of a /proc/PID/maps listing.
type mapping struct {
	Range string // "start-end", its name in /proc/PID/map_files
	Inode
}

// parseMaps reads the file-backed ranges of a /proc/PID/maps listing.
func parseMaps(sc *bufio.Scanner) []mapping {
	var out []mapping
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		ino, err := strconv.ParseUint(f[4], 10, 64)
		maj, mn, ok := strings.Cut(f[3], ":")
		if err != nil || ino == 0 || !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(maj, 16, 32)
		mi, err2 := strconv.ParseUint(mn, 16, 32)
		if err1 == nil && err2 == nil {
			out = append(out, mapping{f[0], Inode{unix.Mkdev(uint32(ma), uint32(mi)), ino}})
		}
	}
	return out
}
