package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestKubernetesManifests (issue 10, done-when 6): every document of
// contrib/kubernetes decodes strictly (no unknown field) as its Kubernetes
// API type, and says what the node needs: the DaemonSet shares the host's
// store, snapshot and socket paths, exposes the metrics port its
// configuration serves, and propagates host mounts; its configuration is
// one weightsnapd accepts; the pod mounts a weights-only image as an image
// volume under the runtime class the manifests define.
func TestKubernetesManifests(t *testing.T) {
	ds, cm, pod, rc := kubernetesManifests(t)
	spec := ds.Spec.Template.Spec
	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	c := spec.Containers[0]
	mounted := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounted[hostPaths[m.Name]] = m
		if p := hostPaths[m.Name]; p != "" && m.MountPath != p {
			t.Errorf("host path %s is mounted at %s: containerd and the CLI see the host's paths", p, m.MountPath)
		}
	}
	for _, p := range []string{"/var/lib/weightsnap", "/run/weightsnap", "/mnt/weightsnap"} {
		if _, ok := mounted[p]; !ok {
			t.Errorf("the DaemonSet does not mount the host's %s", p)
		}
	}
	if m := mounted["/mnt/weightsnap"]; m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
		t.Error("host mounts under /mnt/weightsnap do not propagate to the host")
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("weightsnapd is not privileged: it mounts")
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9878 }) {
		t.Errorf("no metrics port 9878: %+v", c.Ports)
	}
	if !slices.Contains(c.Command, "/etc/weightsnap/config.toml") || mounted[""].MountPath != "/etc/weightsnap" {
		t.Errorf("weightsnapd does not read the ConfigMap's file: %v, %+v", c.Command, mounted[""])
	}

	conf := filepath.Join(t.TempDir(), "config.toml")
	text := cm.Data["config.toml"]
	if !strings.Contains(text, `address = "0.0.0.0:9878"`) {
		t.Errorf("the configuration does not serve metrics on the pod's port 9878:\n%s", text)
	}
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := harness.WeightsnapdBinary()
	if bin == "" {
		harness.Skip(t, "bin/weightsnapd is not built (run make build)")
	}
	if out, err := exec.Command(bin, "--config", conf, "config", "check").CombinedOutput(); err != nil {
		t.Fatalf("weightsnapd config check of the ConfigMap's file: %v\n%s", err, out)
	}

	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != rc.Name || rc.Handler != "weightsnap" {
		t.Errorf("the pod's runtime class %v is not the manifests' %s (handler %s)", pod.Spec.RuntimeClassName, rc.Name, rc.Handler)
	}
	vol := pod.Spec.Volumes[0]
	if vol.Image == nil || vol.Image.Reference == "" {
		t.Fatalf("the pod's volume is not an image volume: %+v", vol)
	}
	if m := pod.Spec.Containers[0].VolumeMounts[0]; m.Name != vol.Name || !m.ReadOnly {
		t.Errorf("the image volume is not mounted read-only: %+v", m)
	}
}

// kubernetesManifests decodes every document of contrib/kubernetes strictly
// (no unknown field) as its Kubernetes API type and returns the DaemonSet,
// the ConfigMap, the pod and the RuntimeClass.
func kubernetesManifests(t *testing.T) (ds *appsv1.DaemonSet, cm *corev1.ConfigMap, pod *corev1.Pod, rc *nodev1.RuntimeClass) {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "contrib", "kubernetes", "*.yaml"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(raw), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 DaemonSet":
				ds = &appsv1.DaemonSet{}
				obj = ds
			case "v1 ConfigMap":
				cm = &corev1.ConfigMap{}
				obj = cm
			case "v1 Pod":
				pod = &corev1.Pod{}
				obj = pod
			case "node.k8s.io/v1 RuntimeClass":
				rc = &nodev1.RuntimeClass{}
				obj = rc
			default:
				t.Fatalf("%s document %d: unexpected %s %s", f, i, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", filepath.Base(f), i, tm.Kind, err)
			}
		}
	}
	if ds == nil || cm == nil || pod == nil || rc == nil {
		t.Fatalf("contrib/kubernetes lacks a DaemonSet, ConfigMap, Pod or RuntimeClass (%d files)", len(files))
	}

	return ds, cm, pod, rc
}

// TestSystemdUnit (issue 10, done-when 6): contrib/systemd/weightsnapd.service
// is a Type=notify, KillMode=process unit that systemd-analyze verify
// accepts without a word (with ExecStart pointing at the built daemon).
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		harness.Skip(t, "no systemd-analyze (Debian systemd; test/e2e/deps installs it)")
	}
	bin := harness.WeightsnapdBinary()
	if bin == "" {
		harness.Skip(t, "bin/weightsnapd is not built (run make build)")
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "contrib", "systemd", "weightsnapd.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	for _, line := range []string{"Type=notify", "KillMode=process", "ExecStart=/usr/local/bin/weightsnapd "} {
		if !strings.Contains(unit, "\n"+line) {
			t.Fatalf("the unit lacks %q", line)
		}
	}
	p := filepath.Join(t.TempDir(), "weightsnapd.service")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(unit, "/usr/local/bin/weightsnapd", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", p).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
