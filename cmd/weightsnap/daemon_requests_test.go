package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// recordingDaemon is a control backend that keeps the requests it gets.
type recordingDaemon struct {
	mu      sync.Mutex
	mounts  []control.HostMountRequest
	publish []control.PublishRequest
}

func (r *recordingDaemon) Mount(_ context.Context, req control.HostMountRequest) (*control.HostMountInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mounts = append(r.mounts, req)
	return &control.HostMountInfo{Dir: req.Dir, ID: req.ID, Leased: true, Writable: req.Writable}, nil
}
func (r *recordingDaemon) Unmount(context.Context, string) error { return errdefs.ErrNotImplemented }
func (r *recordingDaemon) List() []control.HostMountInfo         { return nil }
func (r *recordingDaemon) HoldersOf(artifact.ID) (*control.Holders, error) {
	return nil, errdefs.ErrNotImplemented
}

// daemonConfig serves svc on a control socket in dir, until the test ends,
// and writes there a configuration that names the socket and the store root.
func daemonConfig(t *testing.T, dir, root string, svc control.Services) string {
	t.Helper()
	sock := filepath.Join(dir, "control.sock")
	srv, err := control.Listen(context.Background(), sock, svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("root = %q\n[snapshotter]\ncontrol_address = %q\n", root, sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDaemonRequests: mount --writable asks the daemon for a writable
// mount, and publish --daemon sends the daemon the request its flags make,
// --for expanded from the store and the keys parsed; the daemon's answer is
// what publish prints.
func TestDaemonRequests(t *testing.T) {
	dir := t.TempDir()
	d, weights := storetest.Seeded(t, 64<<10, 1)
	forID, _ := weights.ID()
	rec := &recordingDaemon{}
	answer, _ := artifact.ParseIDHex(strings.Repeat("c", 64))
	cfg := daemonConfig(t, dir, d.Root(), control.Services{Mounts: rec,
		Publish: func(_ context.Context, req control.PublishRequest) (*control.PublishResult, error) {
			rec.mu.Lock()
			rec.publish = append(rec.publish, req)
			rec.mu.Unlock()
			return &control.PublishResult{ID: answer, Present: true}, nil
		}})
	mnt := filepath.Join(dir, "cache")
	if out, err := runCLI(t, "--config", cfg, "mount", "--writable", forID.Hex()[:12], mnt); err != nil || !strings.Contains(out, "writable") {
		t.Fatalf("mount --writable: %q %v", out, err)
	}
	out, err := runCLI(t, "--config", cfg, "publish", "--daemon", "cache-dir", "--kind", "compile-cache", "--for", forID.Hex()[:12],
		"--engine", "vllm", "--engine-version", "0.11.0", "--gpu-arch", "sm_90", "--tp", "4", "--pp", "2", "--key", "cuda=12.8", "--key", "mode=eager")
	if err != nil || !strings.Contains(out, answer.String()) {
		t.Fatalf("publish --daemon: %q %v", out, err)
	}
	if len(rec.mounts) != 1 || !rec.mounts[0].Writable || rec.mounts[0].ID != forID {
		t.Fatalf("mount requests %+v", rec.mounts)
	}
	abs, _ := filepath.Abs("cache-dir")
	want := control.PublishRequest{Kind: "compile-cache", Dir: abs, For: forID, Engine: "vllm", EngineVersion: "0.11.0", GPUArch: "sm_90",
		TPSize: 4, PPSize: 2, Keys: map[string]string{"cuda": "12.8", "mode": "eager"}}
	if len(rec.publish) != 1 || fmt.Sprint(rec.publish[0]) != fmt.Sprint(want) {
		t.Fatalf("publish requests %+v, want %+v", rec.publish, want)
	}
}
