package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Main runs the tests, then CheckNoLeaks; a leak turns a passing run into a failing one. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if err := CheckNoLeaks(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: leak check failed:\n%v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// CheckNoLeaks verifies that everything the harness started is gone: no process it started is alive,
// no process names a harness directory, no container process remains in a harness containerd
// namespace's cgroup, nothing is mounted under a harness directory, and no harness network namespace
// or directory is left. Call it after all tests (Main does).
func CheckNoLeaks() error {
	tracker.Lock()
	procs := append([]trackedProc(nil), tracker.procs...)
	dirs := append([]string(nil), tracker.dirs...)
	netns := append([]string(nil), tracker.netns...)
	ctrNSs := append([]string(nil), tracker.ctrNSs...)
	tracker.Unlock()

	var errs []error
	for _, p := range procs {
		if start, alive := procStart(p.pid); alive && start == p.start {
			errs = append(errs, fmt.Errorf("process %s (pid %d) still running", p.name, p.pid))
		}
	}
	for _, d := range dirs {
		for _, pid := range referencing(d) {
			errs = append(errs, fmt.Errorf("process %d (%s) names harness dir %s", pid, cmdline(pid), d))
		}
		if _, err := os.Stat(d); err == nil {
			errs = append(errs, fmt.Errorf("harness dir %s not removed", d))
		}
	}
	for _, ns := range ctrNSs {
		for _, pid := range inCgroupOf(ns) {
			errs = append(errs, fmt.Errorf("process %d (%s) in containerd namespace %s's cgroup", pid, cmdline(pid), ns))
		}
	}
	mounts, err := mountPoints()
	if err != nil {
		errs = append(errs, err)
	}
	prefixes := append([]string(nil), dirs...)
	for _, n := range netns {
		prefixes = append(prefixes, filepath.Join("/run/netns", n))
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err == nil {
			errs = append(errs, fmt.Errorf("network namespace %s not deleted", n))
		}
	}
	for _, m := range mounts {
		for _, p := range prefixes {
			if under(m, p) {
				errs = append(errs, fmt.Errorf("mount %s remains", m))
				break
			}
		}
	}
	return errors.Join(errs...)
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// mountPoints lists the mount points in /proc/self/mountinfo.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			mps = append(mps, unescapeMountinfo(fields[4]))
		}
	}
	return mps, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder lazily unmounts everything mounted at or under dir, deepest first.
func unmountUnder(dir string) error {
	var errs []error
	for range 3 { // stacked mounts on one point need one unmount each
		mps, err := mountPoints()
		if err != nil {
			return err
		}
		var mine []string
		for _, m := range mps {
			if under(m, dir) {
				mine = append(mine, m)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		sort.Slice(mine, func(i, j int) bool { return len(mine[i]) > len(mine[j]) })
		errs = errs[:0]
		for _, m := range mine {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}
