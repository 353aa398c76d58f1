package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
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
	pod := hostNetworkPod(t, dir, "smoke")
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
	waitCRILog(t, ctd, cid, "hello from cri")
}

// hostNetworkPod writes the config of a host-network pod named name (no CNI
// plugins here; seccomp unconfined: runc is built without it) into dir,
// its logs under dir/logs, and returns its path.
func hostNetworkPod(t *testing.T, dir, name string) string {
	t.Helper()
	pod := filepath.Join(dir, "pod.json")
	writeJSON(t, pod, fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "default", "uid": "%s-%d", "attempt": 0},
  "log_directory": %q,
  "linux": {"security_context": {"namespace_options": {"network": 2}, "seccomp": {"profile_type": 1}}}
}`, name, name, time.Now().UnixNano(), filepath.Join(dir, "logs")))
	return pod
}

// waitCRILog polls the log of the CRI container cid until it holds want,
// and returns it.
func waitCRILog(t *testing.T, ctd *harness.Containerd, cid, want string) string {
	t.Helper()
	var logs string
	if err := testenv.Wait(60*time.Second, func() error {
		if logs, _ = ctd.Crictl("logs", cid); !strings.Contains(logs, want) {
			return fmt.Errorf("%q", logs)
		}
		return nil
	}); err != nil {
		t.Fatalf("the log of container %s lacks %q: %v", cid, want, err)
	}
	return logs
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

// TestCRIImageVolume: containerd's CRI runs a pod
// whose container mounts a weights-only image (weightsnap image build
// --base scratch) as an image volume through the pod's snapshotter,
// weightsnap; the container reads every weight file at the mount path with
// the source's digest, and containerd's content store holds none of those
// bytes. Both contrib snippets: weightsnap as the CRI's snapshotter for
// every pod (weightsnap.toml), and only for pods of the weightsnap runtime
// class (weightsnap-runtime-class.toml, the DaemonSet's).
func TestCRIImageVolume(t *testing.T) {
	for _, tc := range []struct{ snippet, runtime string }{
		{"weightsnap.toml", ""},
		{"weightsnap-runtime-class.toml", "weightsnap"},
	} {
		t.Run(tc.snippet, func(t *testing.T) {
			n := startSnapNodeWith(t, tc.snippet)
			harness.PushPause(t, n.reg)
			a := n.pushArtifact(t, "volume", "16MiB", 2)
			img := n.buildImageOver(t, "scratch", "volume", "", "/llama", a)
			logs := runImageVolumePod(t, n, img, tc.runtime)
			checkSums(t, logs, a)
			n.noWeightBlobs(t, a)
			if got := n.metric(t, `weightsnap_snapshotter_prepares_total{layer="weight",outcome="fetched"}`); got != 1 {
				t.Fatalf("weight prepares fetched %v, want 1\n%s", got, must(n.ws.Metrics()))
			}
		})
	}
}

// runImageVolumePod runs a host-network pod (with the runtime handler, if
// any) whose busybox container mounts img at /models as an image volume and
// prints sha256sum of /models/llama/*; it returns the container's log once
// it has.
func runImageVolumePod(t *testing.T, n *snapNode, img, runtime string) string {
	t.Helper()
	crictl(t, n.ctd, "pull", img) // kubelet pulls an image volume's image first
	crictl(t, n.ctd, "pull", n.base)
	return runReaderPod(t, n.ctd, readerPod{name: "weights", image: n.base, dir: "/models/llama", volume: img, runtime: runtime})
}

// readerPod is a host-network CRI pod whose container, of image (pulled
// already), prints sha256sum of the files in dir and "read-all"; volume,
// when set, is an image (pulled already) mounted at /models as an image
// volume; runtime is the runtime handler ("" for the default); inodes adds
// a line "inode NAME DEV INO" per file (statLines reads them).
type readerPod struct {
	name, image, dir, volume, runtime string
	inodes                            bool
}

// runReaderPod runs p and returns its container's log once it has read
// every file.
func runReaderPod(t *testing.T, ctd *harness.Containerd, p readerPod) string {
	t.Helper()
	dir := t.TempDir()
	pod := hostNetworkPod(t, dir, p.name)
	var mounts string
	if p.volume != "" {
		mounts = fmt.Sprintf(`"mounts": [{"container_path": "/models", "readonly": true, "image": {"image": %q}}],`, p.volume)
	}
	var stat string
	if p.inodes {
		stat = ` && stat -c 'inode %n %d %i' *`
	}
	ctr := filepath.Join(dir, "container.json")
	writeJSON(t, ctr, fmt.Sprintf(`{
  "metadata": {"name": "reader"},
  "image": {"image": %q},
  "command": ["sh", "-c", "cd %s && sha256sum *%s && echo read-all; exec sleep 3600"],
  %s
  "log_path": "reader.log",
  "linux": {"security_context": {"seccomp": {"profile_type": 1}}}
}`, p.image, p.dir, stat, mounts))
	podID := crictl(t, ctd, "runp", "--runtime", p.runtime, pod)
	cid := crictl(t, ctd, "create", podID, ctr, pod)
	crictl(t, ctd, "start", cid)
	return waitCRILog(t, ctd, cid, "read-all")
}
