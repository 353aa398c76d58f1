package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestSmokeCRIPod runs a host-network pod with one busybox container through the CRI with crictl,
// using the locally built sandbox image, and reads the container's log.
func TestSmokeCRIPod(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctd := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg})
	harness.PushPause(t, reg)
	ref := reg.Ref("busybox:latest") // pushed by PushPause
	dir := t.TempDir()

	pod := filepath.Join(dir, "pod.json")
	writeJSON(t, pod, fmt.Sprintf(`{
  "metadata": {"name": "smoke", "namespace": "default", "uid": "smoke-%d", "attempt": 0},
  "log_directory": %q,
  "linux": {"security_context": {"namespace_options": {"network": 2}, "seccomp": {"profile_type": 1}}}
}`, time.Now().UnixNano(), filepath.Join(dir, "logs")))
	ctr := filepath.Join(dir, "container.json")
	writeJSON(t, ctr, fmt.Sprintf(`{
  "metadata": {"name": "c"},
  "image": {"image": %q},
  "command": ["sh", "-c", "echo hello from cri; exec sleep 3600"],
  "log_path": "c.log",
  "linux": {"security_context": {"seccomp": {"profile_type": 1}}}
}`, ref))

	podID := crictl(t, ctd, "runp", pod)
	crictl(t, ctd, "pull", ref)
	cid := crictl(t, ctd, "create", podID, ctr, pod)
	crictl(t, ctd, "start", cid)
	var logs string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		logs, _ = ctd.Crictl("logs", cid)
		if strings.Contains(logs, "hello from cri") {
			return
		}
	}
	t.Fatalf("container log lacks the greeting: %q", logs)
}

func crictl(t *testing.T, ctd *harness.Containerd, args ...string) string {
	t.Helper()
	out, err := ctd.Crictl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func writeJSON(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
