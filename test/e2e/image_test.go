package e2e

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// TestImageRunsAsDaemonSet: `make image` builds
// weightsnapd's image (ko, over a busybox base in the local registry) twice
// to one digest, an image whose entrypoint is the DaemonSet's command and
// whose user is root. The node's containerd runs it as the DaemonSet
// declares it: its command, privileged, the host's network and PIDs, the
// ConfigMap's configuration, and each hostPath volume (temporary host
// directories standing in for /var/lib/weightsnap, /run/weightsnap and
// /mnt/weightsnap) at the same path inside, Bidirectional ones shared both
// ways. A second containerd with the contrib snippet pointing at that
// container's socket runs a weight image through it, and the container
// reads every weight file with its source digest; `weightsnap mount` to
// that weightsnapd mounts the artifact under /mnt/weightsnap's stand-in,
// where the host reads it.
func TestImageRunsAsDaemonSet(t *testing.T) {
	testenv.RequireRoot(t, "running weightsnapd as a DaemonSet")
	tools := harness.Peers(t)
	contrib := kubernetesManifests(t)
	cm, spec := contrib.cm, contrib.ds.Spec.Template.Spec
	c := spec.Containers[0]

	reg := harness.StartRegistry(t)
	base := harness.PushBusybox(t, reg)
	repo := reg.Ref("weightsnap/weightsnapd")
	img := makeImage(t, repo, base)
	if again := makeImage(t, repo, base); again != img {
		t.Fatalf("make image is not reproducible: %s, then %s", img, again)
	}
	var cfg struct {
		Config struct {
			Entrypoint []string
			User       string
		} `json:"config"`
	}
	raw, err := exec.Command(tools.Crane, "config", "--insecure", img).Output()
	if err != nil {
		t.Fatalf("crane config %s: %v", img, err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != c.Command[0] || cfg.Config.User != "0" {
		t.Fatalf("the image runs %v as user %q; the DaemonSet runs %s, as root (it mounts)\n%s", cfg.Config.Entrypoint, cfg.Config.User, c.Command[0], raw)
	}

	// The host: each hostPath under one temporary directory, mounted at that same path inside (as
	// the DaemonSet mounts /var/lib/weightsnap at /var/lib/weightsnap); the ConfigMap at its path.
	host := harness.TempDir(t)
	hostPaths := map[string]string{} // the DaemonSet's host path -> its stand-in
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = filepath.Join(host, v.HostPath.Path)
		}
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	var conf string // the ConfigMap's file on the host, for the CLI
	args := []string{"run", "-d", "--name", "weightsnapd", "--privileged", "--net", "host", "--pid", "host",
		"--security-opt", "seccomp=unconfined", "--entrypoint", c.Command[0]}
	for _, m := range c.VolumeMounts {
		v := volume(t, spec.Volumes, m.Name)
		switch {
		case v.HostPath != nil:
			dir := hostPaths[v.HostPath.Path]
			opt := ""
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
				sharedMount(t, dir)
				opt = ":rshared"
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-v", dir+":"+dir+opt)
		case v.ConfigMap != nil:
			dir := filepath.Join(host, "configmap", m.Name)
			for name, text := range cm.Data {
				writeTestFile(t, filepath.Join(dir, name), daemonSetConfig(t, text, hostPaths, reg.Host, metrics))
				if filepath.Join(m.MountPath, name) == c.Command[len(c.Command)-1] {
					conf = filepath.Join(dir, name)
				}
			}
			args = append(args, "-v", dir+":"+m.MountPath+":ro")
		}
	}
	if conf == "" {
		t.Fatalf("the DaemonSet's command %v names no file of the ConfigMap", c.Command)
	}
	node := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg})
	if _, err := node.Nerdctl(append(append(args, img), c.Command[1:]...)...); err != nil {
		t.Fatalf("nerdctl run of the image: %v", err)
	}
	t.Cleanup(func() { _, _ = node.Nerdctl("rm", "-f", "weightsnapd") })

	state := hostPaths["/var/lib/weightsnap"]
	ws := &harness.Weightsnapd{Dir: host, Root: state, SnapshotRoot: filepath.Join(state, "snapshots"),
		Socket: filepath.Join(hostPaths["/run/weightsnap"], "snapshotter.sock"), Control: filepath.Join(hostPaths["/run/weightsnap"], "control.sock"),
		Config: conf, MetricsURL: "http://" + metrics + "/metrics"}
	waitDaemonSetReady(t, node, ws)

	ctd := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg, Imports: []string{ws.ContainerdSnippet(t)}})
	n := &snapNode{reg: reg, ws: ws, ctd: ctd, base: base}
	w := n.pushWeightImage(t, "ds", "8MiB", 2, "/models/ds")
	out, err := n.run(w.ref, "sh", "-c", "cd /models/ds && sha256sum *")
	if err != nil {
		logs, _ := node.Nerdctl("logs", "weightsnapd")
		t.Fatalf("a weight image through the containerised weightsnapd: %v\nweightsnapd:\n%s", err, logs)
	}
	checkSums(t, out, w.pushedArtifact)
	if n.metric(t, `weightsnap_snapshotter_resolve_seconds_count{outcome="fetched"}`) != 1 {
		t.Fatalf("metrics:\n%s", must(ws.Metrics()))
	}

	// A host mount the container makes under /mnt/weightsnap reaches the host.
	dir := filepath.Join(hostPaths["/mnt/weightsnap"], "ds")
	if r := wsWith(t, ws.Config, "mount", w.id, dir); r.code != 0 {
		t.Fatalf("weightsnap mount through the containerised weightsnapd: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	for p, sum := range w.files {
		raw, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatalf("the host mount did not reach the host: %v", err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(raw)); got != sum {
			t.Fatalf("%s on the host: sha256 %s, the source is %s", p, got, sum)
		}
	}
	if r := wsWith(t, ws.Config, "umount", dir); r.code != 0 {
		t.Fatalf("weightsnap umount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
}

// makeImage runs `make image` with IMAGE_REPO=repo and BASE_IMAGE=base, both in the plain-HTTP
// local registry, and returns the pushed digest reference (its last line).
func makeImage(t *testing.T, repo, base string) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "image", "IMAGE_REPO="+repo, "BASE_IMAGE="+base, "KO_FLAGS=--insecure-registry")
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	ref := lines[len(lines)-1]
	if !strings.HasPrefix(ref, repo+"@sha256:") {
		t.Fatalf("make image printed %q, not %s@sha256:...\n%s", ref, repo, stderr.String())
	}
	return ref
}

func volume(t *testing.T, vols []corev1.Volume, name string) corev1.Volume {
	t.Helper()
	for _, v := range vols {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("the DaemonSet mounts volume %s, which it does not declare", name)
	return corev1.Volume{}
}

// sharedMount makes dir a mount of its own in a shared peer group, as a node's /var/lib and /mnt
// are for Bidirectional propagation (the harness unmounts it with its directory).
func sharedMount(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}
}

// daemonSetConfig is the ConfigMap's configuration for this host: its host paths replaced by their
// stand-ins, the local registry allowed (plain HTTP), metrics on a free loopback port of the host's
// network.
func daemonSetConfig(t *testing.T, text string, hostPaths map[string]string, registry, metrics string) string {
	t.Helper()
	for old, repl := range map[string]string{
		`registries = ["registry.example"]`: fmt.Sprintf("registries = [%q]\nplain_http = true", registry),
		`address = "0.0.0.0:9878"`:          fmt.Sprintf("address = %q", metrics),
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("the ConfigMap's configuration lacks %s:\n%s", old, text)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	for p, dir := range hostPaths {
		text = strings.ReplaceAll(text, `"`+p, `"`+dir)
	}
	return text
}

// waitDaemonSetReady waits until the container's weightsnapd serves metrics (the DaemonSet's
// readiness probe) and its snapshotter socket is there.
func waitDaemonSetReady(t *testing.T, node *harness.Containerd, ws *harness.Weightsnapd) {
	t.Helper()
	err := testenv.Wait(60*time.Second, func() error {
		if _, err := ws.Metrics(); err != nil {
			return err
		}
		_, err := os.Stat(ws.Socket)
		return err
	})
	if err == nil {
		return
	}
	logs, _ := node.Nerdctl("logs", "weightsnapd")
	ps, _ := node.Nerdctl("ps", "-a")
	t.Fatalf("the containerised weightsnapd is not ready: %v\n%s\nweightsnapd:\n%s", err, ps, logs)
}

func writeTestFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
