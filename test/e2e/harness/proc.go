package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// CommandTimeout bounds every one-shot command the harness runs (ctr, nerdctl, crane, ip, ...).
const CommandTimeout = 3 * time.Minute

// stopGrace is how long a daemon gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// tracker records everything the harness creates, for CheckNoLeaks. It is the package's only
// mutable global state.
var tracker struct {
	sync.Mutex
	procs  []trackedProc
	dirs   []string
	netns  []string
	ctrNSs []string // containerd namespaces (unique per containerd), to find container processes
}

type trackedProc struct {
	pid   int
	start string // /proc/PID/stat starttime, to tell a reused pid apart
	name  string
}

// Proc is a long-running process started by the harness.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // stdout and stderr, combined

	done chan struct{}
	err  error // valid once done is closed
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process exits; Err then returns its exit error.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the process's exit error; valid once Done is closed.
func (p *Proc) Err() error { <-p.done; return p.err }

// Kill sends SIGKILL to the process group and waits: a crash.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group, then SIGKILL after a grace period, and waits.
func (p *Proc) Stop() {
	if p.Exited() {
		return
	}
	pid := p.Cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // anything left in the group
}

// TempDir makes a short directory /tmp/ws-XXXXXXXX, removed at cleanup after killing processes
// whose command line names it and lazily unmounting everything mounted under it.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "ws-")
	if err != nil {
		t.Fatal(err)
	}
	tracker.Lock()
	tracker.dirs = append(tracker.dirs, dir)
	tracker.Unlock()
	t.Cleanup(func() {
		killReferencing(dir)
		if err := unmountUnder(dir); err != nil {
			t.Errorf("harness: %v", err)
		}
		keepLogs(t, dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return dir
}

// StartProcess starts argv in dir (its own process group, output to dir/NAME.log) and registers a
// cleanup that stops it and, if the test failed, logs the tail of its output. env nil means the
// harness's environment.
func StartProcess(t testing.TB, dir, name string, env []string, argv ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// The context only bounds the process's life to the harness's; Stop does the orderly part.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	start, _ := procStart(cmd.Process.Pid)
	tracker.Lock()
	tracker.procs = append(tracker.procs, trackedProc{pid: cmd.Process.Pid, start: start, name: name})
	tracker.Unlock()
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		cancel()
		if t.Failed() {
			t.Logf("--- tail of %s (%s) ---\n%s", name, logPath, Tail(logPath, 40))
		}
	})
	return p
}

// Tail returns the last n lines of the file at path (or a note why it cannot).
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	const max = 8 << 10 // log lines can be long (the registry's are); keep t.Log readable
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// keepLogs copies dir's *.log files to $WEIGHTSNAP_E2E_LOGS/<test>/ when that is set.
func keepLogs(t testing.TB, dir string) {
	dst := os.Getenv("WEIGHTSNAP_E2E_LOGS")
	if dst == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		return
	}
	dst = filepath.Join(dst, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Logf("harness: keep logs: %v", err)
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(dir)+"-"+filepath.Base(l)), b, 0o644)
		}
	}
}

// Run runs argv in dir (the current directory if "") with CommandTimeout and returns its standard
// output; a failure's error includes the standard error (and output).
func Run(dir string, argv ...string) (string, error) { return run(nil, dir, argv...) }

// RunEnv is Run with the variables of env over the test's environment.
func RunEnv(env []string, dir string, argv ...string) (string, error) {
	return run(append(os.Environ(), env...), dir, argv...)
}

// run runs a one-shot command with CommandTimeout and returns its stdout. Warnings on stderr (ctr
// warns about cgroup v1 on every call) stay out of the output; the error of a failed command
// includes both streams.
func run(env []string, dir string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w\nstderr: %s\nstdout: %s", strings.Join(argv, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), err
}

// mustRun is run that fails the test on error.
func mustRun(t testing.TB, env []string, dir string, argv ...string) string {
	t.Helper()
	out, err := run(env, dir, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// procStart returns the start time of pid from /proc/PID/stat and whether it is alive (not a zombie).
func procStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); starttime is field 22
	if len(f) < 20 {
		return "", false
	}
	return f[19], f[0] != "Z" && f[0] != "X"
}

// allPids lists the processes in /proc, except this one.
func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// referencing returns the live processes whose command line contains s.
func referencing(s string) []int {
	var pids []int
	for _, pid := range allPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(s)) {
			if _, alive := procStart(pid); alive {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// inCgroupOf returns the live processes whose cgroup path has a component named ns (containerd puts
// container processes under /<namespace>/<id>).
func inCgroupOf(ns string) []int {
	var pids []int
	for _, pid := range allPids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err != nil {
			continue
		}
		if strings.Contains(string(b), ":/"+ns+"/") || strings.Contains(string(b), "/"+ns+"/") {
			if _, alive := procStart(pid); alive {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killReferencing SIGKILLs processes whose command line contains s (containerd shims name their
// containerd's socket, which lives in a harness directory).
func killReferencing(s string) {
	for _, pid := range referencing(s) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitGone(func() []int { return referencing(s) })
}

func waitGone(list func() []int) {
	testenv.Wait(5*time.Second, func() error { // the leak check names any left
		if pids := list(); len(pids) > 0 {
			return fmt.Errorf("processes %v remain", pids)
		}
		return nil
	})
}
