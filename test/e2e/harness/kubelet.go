package harness

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// KubeletOptions configures StartKubelet.
type KubeletOptions struct {
	// Runtime is the containerd whose CRI runs the pods (containerRuntimeEndpoint).
	Runtime *Containerd
	// ImageService is the socket of the CRI image service (imageServiceEndpoint); "" is the
	// runtime's.
	ImageService string
	// Auths are registry credentials, host to "user:password", written to config.json in the
	// kubelet's root directory (the node-wide credentials it sends in PullImage; static pods cannot
	// name Secrets). The kubelet caches that file, so they are fixed for its life.
	Auths map[string]string
	// Config is more of the KubeletConfiguration (YAML, top-level keys), such as evictionHard.
	Config string
}

// Kubelet is a standalone kubelet: static pods from Manifests, no API server.
type Kubelet struct {
	Dir       string // everything lives under here
	Manifests string // staticPodPath: a pod manifest written here runs
	RootDir   string // --root-dir (config.json, pods' volumes)
	PodLogs   string // podLogsDir: <namespace>_<pod>_<uid>/<container>/<n>.log
	NodeName  string // static pods are named <name>-<NodeName>
	Proc      *Proc

	healthz string
}

// kubeletNodeName is --hostname-override.
const kubeletNodeName = "ws-node"

// kubeletScript runs the kubelet in its own mount namespace (unshare -m --propagation slave): it
// writes /var/log/containers and /var/lib/kubelet/device-plugins whatever --root-dir says, so
// overlays over /var/lib and /var/log take those writes into $T; with protectKernelDefaults it
// refuses to start unless three sysctls hold its values, so files holding them are bound over the
// /proc/sys entries, and the machine keeps its own.
const kubeletScript = `set -e
mount -t overlay overlay -o lowerdir=/var/lib,upperdir=$T/ns/varlib-upper,workdir=$T/ns/varlib-work /var/lib
mount -t overlay overlay -o lowerdir=/var/log,upperdir=$T/ns/varlog-upper,workdir=$T/ns/varlog-work /var/log
mount --bind $T/ns/sysctl/overcommit_memory /proc/sys/vm/overcommit_memory
mount --bind $T/ns/sysctl/panic /proc/sys/kernel/panic
mount --bind $T/ns/sysctl/panic_on_oops /proc/sys/kernel/panic_on_oops
exec "$KUBELET" --config="$T/kubelet-config.yaml" --root-dir="$T/root" --cert-dir="$T/root/pki" \
	--hostname-override=` + kubeletNodeName + ` -v=2
`

// StartKubelet starts the pinned kubelet standalone (root needed) and waits until its healthz
// answers. Its configuration: static pods from Manifests, checked every second; cgroupfs
// (PID 1 is not systemd), failCgroupV1 false (these machines are cgroup v1; 1.35 and later refuse
// it otherwise), failSwapOn false, no kubeconfig, anonymous AlwaysAllow on loopback ports.
// Teardown stops the kubelet, removes the CRI pods it ran, and kills and removes the kubepods
// cgroup trees it created.
func StartKubelet(t testing.TB, opts KubeletOptions) *Kubelet {
	t.Helper()
	testenv.RequireRoot(t, "running a kubelet")
	tools := Peers(t)
	dir := TempDir(t)
	k := &Kubelet{Dir: dir, Manifests: filepath.Join(dir, "manifests"), RootDir: filepath.Join(dir, "root"),
		PodLogs: filepath.Join(dir, "pod-logs"), NodeName: kubeletNodeName}
	for _, d := range []string{k.Manifests, k.RootDir, k.PodLogs, filepath.Join(dir, "volume-plugins"),
		filepath.Join(dir, "ns", "varlib-upper"), filepath.Join(dir, "ns", "varlib-work"),
		filepath.Join(dir, "ns", "varlog-upper"), filepath.Join(dir, "ns", "varlog-work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]string{"overcommit_memory": "1", "panic": "10", "panic_on_oops": "1"} {
		writeFile(t, filepath.Join(dir, "ns", "sysctl", name), v+"\n")
	}
	auths := map[string]map[string]string{}
	for host, cred := range opts.Auths {
		auths[host] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(cred))}
	}
	raw, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(k.RootDir, "config.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	images := opts.ImageService
	if images == "" {
		images = opts.Runtime.Socket
	}
	port, healthz := FreePort(t), FreePort(t)
	k.healthz = fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz)
	writeFile(t, filepath.Join(dir, "kubelet-config.yaml"), fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
staticPodPath: %s
fileCheckFrequency: 1s
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
podLogsDir: %s
volumePluginDir: %s
protectKernelDefaults: true
%s`, k.Manifests, opts.Runtime.Socket, images, port, healthz, k.PodLogs, filepath.Join(dir, "volume-plugins"), opts.Config))

	existed := kubepodsTrees()
	t.Cleanup(func() { k.teardown(opts.Runtime, existed) }) // after the process is stopped
	k.Proc = StartProcess(t, dir, "kubelet", tools.pathEnv("T="+dir, "KUBELET="+tools.Kubelet),
		"unshare", "-m", "--propagation", "slave", "sh", "-c", kubeletScript)
	if err := k.waitReady(60 * time.Second); err != nil {
		t.Fatalf("the kubelet did not start: %v\n%s", err, Tail(k.Proc.Log, 40))
	}
	return k
}

func (k *Kubelet) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	return testenv.Wait(timeout, func() error {
		if k.Proc.Exited() {
			return testenv.Final(fmt.Errorf("the kubelet exited: %v", k.Proc.Err()))
		}
		resp, err := client.Get(k.healthz)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	})
}

// PodManifest writes the static pod manifest name.json (JSON is YAML) into Manifests.
func (k *Kubelet) PodManifest(t testing.TB, name, manifest string) {
	t.Helper()
	tmp := filepath.Join(k.Dir, name+".json.tmp")
	writeFile(t, tmp, manifest)
	if err := os.Rename(tmp, filepath.Join(k.Manifests, name+".json")); err != nil { // whole, never half read
		t.Fatal(err)
	}
}

// RemovePodManifest removes the static pod manifest name.json: the kubelet stops that pod.
func (k *Kubelet) RemovePodManifest(t testing.TB, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(k.Manifests, name+".json")); err != nil {
		t.Fatal(err)
	}
}

// teardown stops the kubelet, removes the CRI pods it ran (containerd still runs: its own
// teardown comes later), kills what is left in the kubepods cgroups it created and removes them.
func (k *Kubelet) teardown(ctd *Containerd, existed map[string]bool) {
	if k.Proc != nil {
		k.Proc.Stop()
	}
	if !ctd.Proc.Exited() {
		_, _ = ctd.Crictl("rmp", "--all", "--force")
	}
	for _, root := range kubepodsRoots() {
		if existed[root] {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range dirs {
			killCgroup(d)
		}
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) }) // children first
		for _, d := range dirs {
			testenv.Wait(5*time.Second, func() error { // its processes may take a moment to go
				if err := syscall.Rmdir(d); err != nil && !os.IsNotExist(err) {
					return err
				}
				return nil
			})
		}
	}
}

// killCgroup SIGKILLs every process in the cgroup directory dir.
func killCgroup(dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(raw)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// kubepodsRoots are the kubepods directories in every cgroup hierarchy mounted (the v1 ones and
// the v2 one in unified) that exist now.
func kubepodsRoots() []string {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var roots []string
	for _, line := range strings.Split(string(raw), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		if p := filepath.Join(f[4], "kubepods"); isDir(p) {
			roots = append(roots, p)
		}
	}
	return roots
}

// kubepodsTrees is the set of kubepodsRoots, to leave alone what was there before.
func kubepodsTrees() map[string]bool {
	m := map[string]bool{}
	for _, r := range kubepodsRoots() {
		m[r] = true
	}
	return m
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
