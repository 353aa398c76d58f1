package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// TestCheckNoLeaksFinds plants a leaked process and a leaked mount and checks that CheckNoLeaks
// reports both, then that it passes once they are gone.
func TestCheckNoLeaksFinds(t *testing.T) {
	testenv.RequireRoot(t, "mounting in a leak check")
	dir, err := os.MkdirTemp("/tmp", "ws-leaktest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	mnt := filepath.Join(dir, "m")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)

	tracker.Lock()
	saved := tracker.procs
	savedDirs := tracker.dirs
	start, _ := procStart(sleep.Process.Pid)
	tracker.procs = append(tracker.procs, trackedProc{pid: sleep.Process.Pid, start: start, name: "planted"})
	tracker.dirs = append(tracker.dirs, dir)
	tracker.Unlock()
	defer func() {
		tracker.Lock()
		tracker.procs, tracker.dirs = saved, savedDirs
		tracker.Unlock()
	}()

	err = CheckNoLeaks()
	if err == nil || !strings.Contains(err.Error(), "process planted") || !strings.Contains(err.Error(), "mount "+mnt) {
		t.Fatalf("CheckNoLeaks missed the planted leaks: %v", err)
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	if err := unmountUnder(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := CheckNoLeaks(); err != nil {
		t.Fatalf("leaks reported after cleanup: %v", err)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/tmp/a\040b\134c`); got != `/tmp/a b\c` {
		t.Fatalf("got %q", got)
	}
}
