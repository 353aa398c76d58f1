package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestOCIPullResumeInsideAFile: a 512 MiB
// single-file pull over a shaped link (64 MiB/s), stopped with SIGINT
// once half of it was served, exits 130 saying what it kept (SIGTERM: 143);
// gc right after keeps the build; the rerun continues the file, reusing at
// least 40%, and the artifact passes verify --full.
func TestOCIPullResumeInsideAFile(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	_, src, id := ociCheckpoint(t, "512MiB", 1)
	wsOK(t, src, "push", "--plain-http", id, reg.Ref("models/big:v1"))
	// Ranges (the default for one large file) stopped by SIGINT, and one
	// stream stopped by SIGTERM.
	for _, c := range []struct {
		ranges string
		sig    syscall.Signal
		code   int
		name   string
	}{{"auto", syscall.SIGINT, 130, "SIGINT"}, {"off", syscall.SIGTERM, 143, "SIGTERM"}} {
		t.Run("ranges "+c.ranges, func(t *testing.T) { pullInterruptedAndResumed(t, reg, c.ranges, c.sig, c.code, c.name) })
	}
}

func pullInterruptedAndResumed(t *testing.T, reg *harness.Registry, ranges string, sig syscall.Signal, code int, name string) {
	proxy := newBlobProxy(t, reg)
	ref := proxy.host() + "/models/big:v1"
	root := filepath.Join(t.TempDir(), "store")
	const total = 512 << 20
	pullArgs := []string{"--root", root, "--config", "", "pull", "--plain-http", "--ranges", ranges, "--json", ref}

	proxy.rate.Store(64 << 20)
	proxy.reachAt.Store(total / 2)
	cmd := exec.Command(weightsnapBin(t), pullArgs...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+t.TempDir())
	var firstErr bytes.Buffer
	cmd.Stderr = &firstErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-proxy.reached:
	case err := <-exited:
		t.Fatalf("the first pull ended before it got halfway (%v):\n%s", err, firstErr.String())
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the first pull never got halfway:\n%s", firstErr.String())
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the interrupted pull did not stop:\n%s", firstErr.String())
	}
	first := proxy.served.Load()
	t.Logf("first pull: exit %d after %d bytes served:\n%s", cmd.ProcessState.ExitCode(), first, firstErr.String())
	if got := cmd.ProcessState.ExitCode(); got != code {
		t.Fatalf("the pull stopped by %s exited %d, want %d", name, got, code)
	}
	if msg := firstErr.String(); !strings.Contains(msg, name) || !strings.Contains(msg, "kept ") || !strings.Contains(msg, "run the same command again") {
		t.Fatalf("the interrupted pull does not say what it kept and how to go on:\n%s", msg)
	}

	gc := wsOK(t, root, "gc")
	if !strings.Contains(gc, "kept tmp/") || !strings.Contains(gc, "resumable") {
		t.Fatalf("gc right after the interrupted pull:\n%s", gc)
	}
	if tmp, _ := os.ReadDir(filepath.Join(root, "tmp")); len(tmp) != 1 {
		t.Fatalf("gc left %d temp builds, want the interrupted one", len(tmp))
	}

	proxy.rate.Store(0)
	proxy.served.Store(0)
	r := ws(t, root, pullArgs[4:]...)
	if r.code != 0 {
		t.Fatalf("the rerun: exit %d\n%s", r.code, r.errOut)
	}
	var rep pullReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatal(err)
	}
	second := proxy.served.Load()
	t.Logf("rerun: artifact %d bytes; served %d; reused %d bytes (%.0f%%), %d files whole, %d continued",
		rep.Bytes, second, rep.Reused, 100*float64(rep.Reused)/float64(rep.Bytes), rep.ReusedFiles, rep.Resumed)
	if !rep.Built || rep.Resumed != 1 || rep.Reused < rep.Bytes*4/10 || rep.Reused+rep.Fetched != rep.Bytes {
		t.Fatalf("resume report %+v", rep)
	}
	if slack := int64(1 << 20); second > rep.Bytes-rep.Reused+slack {
		t.Fatalf("the rerun was served %d bytes for %d missing", second, rep.Bytes-rep.Reused)
	}
	if out := wsOK(t, root, "verify", "--full", rep.Identity); !strings.Contains(out, "valid") {
		t.Fatal(out)
	}
}
