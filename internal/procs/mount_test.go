package procs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestMountUsers: a process using a file through a bind mount, or through
// another bind of it in another mount namespace, by an open descriptor or
// a mapping, uses the mount; one using the same file through its source
// directory does not.
func TestMountUsers(t *testing.T) {
	testenv.RequireRoot(t, "a bind mount")
	src, dir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "w"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	users := func() []int {
		t.Helper()
		hs, err := MountUsers(dir)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		for _, h := range hs {
			pids = append(pids, h.PID)
		}
		return pids
	}
	if got := users(); len(got) != 0 {
		t.Fatalf("users of an idle mount: %v", got)
	}
	if _, err := MountUsers(filepath.Join(dir, "w")); err == nil {
		t.Fatal("a file that is no mount point has users")
	}

	viaSource, err := os.Open(filepath.Join(src, "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer viaSource.Close()
	if got := users(); len(got) != 0 {
		t.Fatalf("the file open through its source makes users %v", got)
	}

	f, err := os.Open(filepath.Join(dir, "w"))
	if err != nil {
		t.Fatal(err)
	}
	if got := users(); !slices.Contains(got, os.Getpid()) {
		t.Fatalf("users %v lack this process, which has a file open", got)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := users(); !slices.Contains(got, os.Getpid()) {
		t.Fatalf("users %v lack this process, which has a file mapped", got)
	}
	unix.Munmap(mem)
	if got := users(); slices.Contains(got, os.Getpid()) {
		t.Fatalf("users %v name this process, which closed and unmapped the file", got)
	}

	// Another mount namespace binds the mount elsewhere and holds a file
	// open through that bind.
	testenv.LookPath(t, "unshare", "Debian util-linux")
	other := t.TempDir()
	cmd := exec.Command("unshare", "-m", "--propagation", "slave", "sh", "-c",
		`mount --bind "$1" "$2" && exec 3<"$2/w" && echo ready && exec sleep 60`, "sh", dir, other)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "ready" {
		t.Fatal("the other namespace did not start")
	}
	hs, err := MountUsers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].PID != cmd.Process.Pid || hs[0].Command != "sleep" {
		t.Fatalf("users %+v, want pid %d (sleep)", hs, cmd.Process.Pid)
	}
}
