package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestKubernetesManifests: every
// document of contrib/kubernetes decodes strictly (no unknown field) as its
// Kubernetes API type, and says what the node needs: the DaemonSet shares the
// host's store, snapshot, socket and containerd paths, exposes the metrics
// port its configuration serves, and propagates host mounts; its
// configuration is one weightsnapd accepts and serves the CRI image service on
// the socket the kubelet snippet names, forwarding to the snippet's runtime
// endpoint; the pods mount images as image volumes under the runtime class
// the manifests define, the ModelPack one with a pull secret and subPath model.
func TestKubernetesManifests(t *testing.T) {
	m := kubernetesManifests(t)
	spec := m.ds.Spec.Template.Spec
	hostPaths := map[string]string{} // volume name -> host path, or "configmap:NAME"
	for _, v := range spec.Volumes {
		switch {
		case v.HostPath != nil:
			hostPaths[v.Name] = v.HostPath.Path
		case v.ConfigMap != nil:
			hostPaths[v.Name] = "configmap:" + v.ConfigMap.Name
		}
	}
	c := spec.Containers[0]
	mounted := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounted[hostPaths[vm.Name]] = vm
		if p := hostPaths[vm.Name]; p != "" && !strings.HasPrefix(p, "configmap:") && vm.MountPath != p {
			t.Errorf("host path %s is mounted at %s: containerd and the CLI see the host's paths", p, vm.MountPath)
		}
	}
	for _, p := range []string{"/var/lib/weightsnap", "/run/weightsnap", "/mnt/weightsnap", "/run/containerd"} {
		if _, ok := mounted[p]; !ok {
			t.Errorf("the DaemonSet does not mount the host's %s", p)
		}
	}
	if vm := mounted["/mnt/weightsnap"]; vm.MountPropagation == nil || *vm.MountPropagation != corev1.MountPropagationBidirectional {
		t.Error("host mounts under /mnt/weightsnap do not propagate to the host")
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("weightsnapd is not privileged: it mounts")
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9878 }) {
		t.Errorf("no metrics port 9878: %+v", c.Ports)
	}
	if !slices.Contains(c.Command, "/etc/weightsnap/config.toml") || mounted["configmap:weightsnapd"].MountPath != "/etc/weightsnap" {
		t.Errorf("weightsnapd does not read the ConfigMap's file: %v, %+v", c.Command, mounted["configmap:weightsnapd"])
	}

	text := m.cm.Data["config.toml"]
	// The prefetch ConfigMap is mounted where [prefetch] dir says.
	if pm := mounted["configmap:weightsnapd-prefetch"]; pm.MountPath == "" || !strings.Contains(text, fmt.Sprintf("dir = %q", pm.MountPath)) || m.prefetch == nil || m.prefetch.Data["models.toml"] == "" {
		t.Errorf("the prefetch ConfigMap is not mounted at the configuration's [prefetch] dir: %+v\n%s", pm, text)
	}
	if !strings.Contains(text, `address = "0.0.0.0:9878"`) {
		t.Errorf("the configuration does not serve metrics on the pod's port 9878:\n%s", text)
	}
	checkCRISockets(t, text, m.kubelet, mounted)
	conf := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := harness.WeightsnapdBinary()
	if bin == "" {
		testenv.Skip(t, "bin/weightsnapd is not built (run make build)")
	}
	if out, err := exec.Command(bin, "--config", conf, "config", "check").CombinedOutput(); err != nil {
		t.Fatalf("weightsnapd config check of the ConfigMap's file: %v\n%s", err, out)
	}

	for name, pod := range m.pods {
		if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != m.rc.Name || m.rc.Handler != "weightsnap" {
			t.Errorf("%s: the pod's runtime class %v is not the manifests' %s (handler %s)", name, pod.Spec.RuntimeClassName, m.rc.Name, m.rc.Handler)
		}
		vol := pod.Spec.Volumes[0]
		if vol.Image == nil || vol.Image.Reference == "" {
			t.Fatalf("%s: the pod's volume is not an image volume: %+v", name, vol)
		}
		if vm := pod.Spec.Containers[0].VolumeMounts[0]; vm.Name != vol.Name || !vm.ReadOnly {
			t.Errorf("%s: the image volume is not mounted read-only: %+v", name, vm)
		}
	}
	mp := m.pods["pod-modelpack-volume.yaml"]
	if mp == nil {
		t.Fatalf("contrib/kubernetes lacks pod-modelpack-volume.yaml (pods: %d)", len(m.pods))
	}
	if s := mp.Spec.ImagePullSecrets; len(s) != 1 || s[0].Name != "registry-creds" {
		t.Errorf("the ModelPack pod's pull secrets are %+v, not registry-creds", s)
	}
	if vm := mp.Spec.Containers[0].VolumeMounts[0]; vm.SubPath != "model" || vm.MountPath != "/models" {
		t.Errorf("the ModelPack volume is not mounted at /models with subPath model (the weights-only image's files sit under /model): %+v", vm)
	}
}

// checkCRISockets checks that the ConfigMap's configuration text serves the
// CRI image service on the kubelet snippet's imageServiceEndpoint and
// forwards to its containerRuntimeEndpoint, and that both sockets are on
// host paths the DaemonSet mounts (mounted: host path -> mount).
func checkCRISockets(t *testing.T, text string, k *kubeletConfig, mounted map[string]corev1.VolumeMount) {
	t.Helper()
	var conf struct {
		CRI struct {
			Address  string `toml:"address"`
			Upstream string `toml:"upstream"`
		} `toml:"cri"`
	}
	if err := toml.Unmarshal([]byte(text), &conf); err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	for _, s := range []struct{ what, socket, endpoint string }{
		{"[cri] address", conf.CRI.Address, k.ImageServiceEndpoint},
		{"[cri] upstream", conf.CRI.Upstream, k.ContainerRuntimeEndpoint},
	} {
		if "unix://"+s.socket != s.endpoint {
			t.Errorf("the ConfigMap's %s %q is not the kubelet's %s", s.what, s.socket, s.endpoint)
		}
		if _, ok := mounted[filepath.Dir(s.socket)]; !ok {
			t.Errorf("the ConfigMap's %s %q is on no host path the DaemonSet mounts", s.what, s.socket)
		}
	}
}

// kubeletConfig is the part of a KubeletConfiguration
// (kubelet.config.k8s.io/v1beta1) that contrib/kubernetes/kubelet-config.yaml
// sets: k8s.io/kubelet is not in the module graph, so the snippet is decoded
// strictly into these fields only.
type kubeletConfig struct {
	metav1.TypeMeta          `json:",inline"`
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
	ImageServiceEndpoint     string `json:"imageServiceEndpoint"`
}

// manifests are the documents of contrib/kubernetes; pods by file name.
type manifests struct {
	ds       *appsv1.DaemonSet
	cm       *corev1.ConfigMap // weightsnapd's configuration
	prefetch *corev1.ConfigMap // its prefetch directory
	pods     map[string]*corev1.Pod
	rc       *nodev1.RuntimeClass
	kubelet  *kubeletConfig
}

// kubernetesManifests decodes every document of contrib/kubernetes strictly
// (no unknown field) as its Kubernetes API type.
func kubernetesManifests(t *testing.T) manifests {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	m := manifests{pods: map[string]*corev1.Pod{}}
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
				m.ds = &appsv1.DaemonSet{}
				obj = m.ds
			case "v1 ConfigMap":
				cm := &corev1.ConfigMap{}
				if strings.Contains(doc, "name: weightsnapd-prefetch") {
					m.prefetch = cm
				} else {
					m.cm = cm
				}
				obj = cm
			case "v1 Pod":
				pod := &corev1.Pod{}
				m.pods[filepath.Base(f)] = pod
				obj = pod
			case "node.k8s.io/v1 RuntimeClass":
				m.rc = &nodev1.RuntimeClass{}
				obj = m.rc
			case "kubelet.config.k8s.io/v1beta1 KubeletConfiguration":
				m.kubelet = &kubeletConfig{}
				obj = m.kubelet
			default:
				t.Fatalf("%s document %d: unexpected %s %s", f, i, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", filepath.Base(f), i, tm.Kind, err)
			}
		}
	}
	if m.ds == nil || m.cm == nil || len(m.pods) == 0 || m.rc == nil || m.kubelet == nil {
		t.Fatalf("contrib/kubernetes lacks a DaemonSet, ConfigMap, Pod, RuntimeClass or KubeletConfiguration (%d files)", len(files))
	}
	return m
}

// TestSystemdUnit: contrib/systemd/weightsnapd.service
// is a Type=notify, KillMode=process unit that systemd-analyze verify
// accepts without a word (with ExecStart pointing at the built daemon).
func TestSystemdUnit(t *testing.T) {
	analyze := testenv.LookPath(t, "systemd-analyze", "Debian systemd; test/e2e/deps installs it")
	bin := harness.WeightsnapdBinary()
	if bin == "" {
		testenv.Skip(t, "bin/weightsnapd is not built (run make build)")
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
