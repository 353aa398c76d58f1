package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// ContainerdOptions configures StartContainerd.
type ContainerdOptions struct {
	// Registry, when set, is configured for plain HTTP (hosts.toml under HostsDir, used by CRI pulls,
	// by nerdctl --hosts-dir and by ctr --hosts-dir), and the CRI sandbox image is pinned to
	// Registry.Ref("pause:3.10"), which PushPause pushes.
	Registry *Registry
	// SandboxImage overrides the pinned CRI sandbox image.
	SandboxImage string
	// Imports are configuration files containerd imports (merged over the generated config.toml),
	// such as the contrib snippet (Weightsnapd.ContainerdSnippet).
	Imports []string
	// Binary is the containerd binary to run; "" is the pinned one (Tools.Containerd). A
	// containerd with plugins compiled in (weightsnap's built-in mode) is one.
	Binary string
	// Erofs enables containerd's erofs differ for its erofs snapshotter (`--snapshotter erofs`),
	// which converts each layer into an EROFS image (mkfs.erofs --tar=f). The diff service tries
	// the erofs differ first and the walking differ after it, so the other snapshotters unpack as
	// before. It needs the bin directory's mkfs.erofs (test/e2e/deps); the test skips without it.
	//
	// Not the differ's tar-index mode (enable_tar_index): with mkfs.erofs 1.8.6 its index names
	// the tar as an extra device, which containerd 2.4.2 (index and tar in one file) passes to
	// no reader: ctr's view of the image fails with "invalid super block: extra devices count 1
	// does not match provided 0".
	Erofs bool
	// ExtraConfig is appended to the generated config.toml (version 3). It may add new tables, such
	// as [proxy_plugins.weightsnap]; it must not repeat a table the harness writes (grpc, ttrpc,
	// debug, plugins."io.containerd.internal.v1.opt", plugins."io.containerd.grpc.v1.cri",
	// plugins."io.containerd.cri.v1.runtime", plugins."io.containerd.cri.v1.images").
	ExtraConfig string
	// NetNS, when set, runs containerd and Nerdctl in this network namespace (NS.Enter: the host's
	// mounts), so their pulls reach what the namespace reaches.
	NetNS *NS
}

// erofsConfig is the configuration of the erofs differ. Its options are those containerd's
// docs/snapshotters/erofs.md recommends for erofs-utils 1.8.2+: reproducible images (-T0
// --mkfs-time) and the tar's own order (--sort=none), so that mkfs.erofs streams the tar.
const erofsConfig = `
[plugins."io.containerd.differ.v1.erofs"]
  mkfs_options = ["-T0", "--mkfs-time", "--sort=none"]

[plugins."io.containerd.service.v1.diff-service"]
  default = ["erofs", "walking"]
`

// Containerd is a containerd daemon with its own root, state, socket and namespace.
type Containerd struct {
	Dir       string // everything lives under here
	Socket    string // gRPC socket
	Namespace string // unique namespace used by Ctr and Nerdctl (the CRI uses k8s.io)
	Root      string
	State     string
	HostsDir  string // registry hosts (certs.d layout)
	Config    string // config.toml path
	Proc      *Proc
	Tools     *Tools
	Binary    string // the containerd binary

	crictlConfig string
	nerdctlToml  string
	netns        *NS
}

// StartContainerd starts containerd (root needed) and waits until it answers. Teardown kills and
// removes every task, container and CRI pod, stops containerd, kills leftover shims, unmounts
// everything under Dir and removes it.
func StartContainerd(t testing.TB, opts ContainerdOptions) *Containerd {
	t.Helper()
	testenv.RequireRoot(t, "running containerd")
	tools := Peers(t)
	dir := TempDir(t)
	c := &Containerd{
		Dir:          dir,
		Socket:       filepath.Join(dir, "c.sock"),
		Namespace:    "ws-" + randHex(4),
		Root:         filepath.Join(dir, "root"),
		State:        filepath.Join(dir, "state"),
		HostsDir:     filepath.Join(dir, "certs.d"),
		Config:       filepath.Join(dir, "config.toml"),
		Tools:        tools,
		Binary:       opts.Binary,
		crictlConfig: filepath.Join(dir, "crictl.yaml"),
		nerdctlToml:  filepath.Join(dir, "nerdctl.toml"),
		netns:        opts.NetNS,
	}
	tracker.Lock()
	tracker.ctrNSs = append(tracker.ctrNSs, c.Namespace)
	tracker.Unlock()

	sandbox := opts.SandboxImage
	if sandbox == "" && opts.Registry != nil {
		sandbox = opts.Registry.Ref("pause:3.10")
	}
	for _, d := range []string{c.HostsDir, filepath.Join(dir, "cni", "net.d"), filepath.Join(dir, "cni", "bin"), filepath.Join(dir, "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Registry != nil {
		writeFile(t, filepath.Join(c.HostsDir, opts.Registry.Host, "hosts.toml"), fmt.Sprintf(`server = %q

[host.%q]
  capabilities = ["pull", "resolve", "push"]
`, opts.Registry.URL, opts.Registry.URL))
	}
	extra := opts.ExtraConfig
	if opts.Erofs {
		tools.MkfsErofs(t)
		extra = erofsConfig + extra
	}
	writeFile(t, c.Config, c.config(sandbox, opts.Imports)+"\n"+extra+"\n")
	writeFile(t, c.crictlConfig, fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", c.Socket, c.Socket))
	writeFile(t, c.nerdctlToml, "")

	if c.Binary == "" {
		c.Binary = tools.Containerd
	}
	c.start(t)
	t.Cleanup(c.teardown) // runs before the process is stopped (cleanups run last-in first-out)
	return c
}

// start runs containerd and waits until it answers.
func (c *Containerd) start(t testing.TB) {
	t.Helper()
	c.Proc = StartProcess(t, c.Dir, "containerd", c.Tools.pathEnv(), c.inNetNS(c.Binary, "--config", c.Config)...)
	if err := c.waitReady(60 * time.Second); err != nil {
		t.Fatalf("containerd did not start: %v\n%s", err, Tail(c.Proc.Log, 40))
	}
	// Its configuration and every snippet it imports (contrib/containerd's among them) are of
	// containerd's current version: nothing for it to migrate at every start.
	if raw, err := os.ReadFile(c.Proc.Log); err != nil || bytes.Contains(raw, []byte("Configuration migrated from version")) {
		t.Fatalf("containerd migrated its configuration (%v):\n%s", err, Tail(c.Proc.Log, 40))
	}
}

// Restart stops containerd (SIGTERM; running containers and their shims stay) and starts it
// again with the same configuration.
func (c *Containerd) Restart(t testing.TB) {
	t.Helper()
	c.Proc.Stop()
	c.start(t)
	// The new process's stop runs before the teardown registered at the first start (cleanups
	// run last-in first-out): tear down again first, while this one runs.
	t.Cleanup(c.teardown)
}

func (c *Containerd) config(sandbox string, imports []string) string {
	quoted := make([]string, len(imports))
	for i, p := range imports {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	var pinned string
	if sandbox != "" {
		pinned = fmt.Sprintf("\n  [plugins.\"io.containerd.cri.v1.images\".pinned_images]\n    sandbox = %q\n", sandbox)
	}
	return fmt.Sprintf(`version = 4
imports = [%s]
root = %q
state = %q
# NRI listens on a fixed host path; two test daemons would collide.
disabled_plugins = ["io.containerd.nri.v1.nri"]

[plugins."io.containerd.server.v1.grpc"]
  address = %q

[plugins."io.containerd.server.v1.ttrpc"]
  address = %q

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.runtime"]
  # These machines lack CAP_SYS_RESOURCE: without this every sandbox fails in runc.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %q
%s`, strings.Join(quoted, ", "), c.Root, c.State, c.Socket, c.Socket+".ttrpc", filepath.Join(c.Dir, "opt"),
		filepath.Join(c.Dir, "cni", "bin"), filepath.Join(c.Dir, "cni", "net.d"), c.HostsDir, pinned)
}

func (c *Containerd) waitReady(timeout time.Duration) error {
	return testenv.Wait(timeout, func() error {
		if c.Proc.Exited() {
			return testenv.Final(fmt.Errorf("containerd exited: %v", c.Proc.Err()))
		}
		_, err := c.Ctr("version")
		return err
	})
}

// Ctr runs ctr against this containerd in its namespace and returns its stdout
// (the error carries stderr).
func (c *Containerd) Ctr(args ...string) (string, error) {
	return c.ctrIn(c.Namespace, args...)
}

func (c *Containerd) ctrIn(ns string, args ...string) (string, error) {
	argv := append([]string{c.Tools.Ctr, "--address", c.Socket, "--namespace", ns}, args...)
	return run(c.Tools.pathEnv(), c.Dir, argv...)
}

// Nerdctl runs nerdctl against this containerd in its namespace, with its own data root, the
// registry hosts directory and plain HTTP allowed, and returns its stdout
// (the error carries stderr).
func (c *Containerd) Nerdctl(args ...string) (string, error) {
	argv := append([]string{c.Tools.Nerdctl, "--address", c.Socket, "--namespace", c.Namespace,
		"--data-root", filepath.Join(c.Dir, "nerdctl"), "--hosts-dir", c.HostsDir, "--insecure-registry",
		"--cni-path", filepath.Join(c.Dir, "cni", "bin"), "--cni-netconfpath", filepath.Join(c.Dir, "cni", "net.d")},
		args...)
	return run(c.Tools.pathEnv("NERDCTL_TOML="+c.nerdctlToml), c.Dir, c.inNetNS(argv...)...)
}

// inNetNS is argv in containerd's network namespace (ContainerdOptions.NetNS), or argv.
func (c *Containerd) inNetNS(argv ...string) []string {
	if c.netns == nil {
		return argv
	}
	return c.netns.Enter(argv...)
}

// Crictl runs crictl against this containerd's CRI (namespace k8s.io) and returns its stdout (the
// error carries stderr).
func (c *Containerd) Crictl(args ...string) (string, error) {
	argv := append([]string{c.Tools.Crictl, "--config", c.crictlConfig}, args...)
	return run(c.Tools.pathEnv(), c.Dir, argv...)
}

// teardown removes every CRI pod and every task and container in every namespace, while containerd
// still runs. The harness then stops containerd, kills what still names Dir (shims) and unmounts.
func (c *Containerd) teardown() {
	if c.Proc.Exited() {
		return
	}
	if out, err := c.Crictl("pods", "-q"); err == nil && strings.TrimSpace(out) != "" {
		_, _ = c.Crictl("rmp", "--all", "--force")
	}
	out, err := c.ctrIn("default", "namespaces", "list", "-q")
	if err != nil {
		return
	}
	for _, ns := range strings.Fields(out) {
		tasks, _ := c.ctrIn(ns, "tasks", "list", "-q")
		for _, id := range strings.Fields(tasks) {
			_, _ = c.ctrIn(ns, "tasks", "kill", "--all", "--signal", "SIGKILL", id)
			_, _ = c.ctrIn(ns, "tasks", "delete", "--force", id)
		}
		ctrs, _ := c.ctrIn(ns, "containers", "list", "-q")
		for _, id := range strings.Fields(ctrs) {
			_, _ = c.ctrIn(ns, "containers", "delete", id)
		}
	}
	// Kill anything left in this namespace's cgroups (a container whose shim is gone).
	for _, pid := range inCgroupOf(c.Namespace) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.RemoveAll(filepath.Join("/run/containerd/runc", c.Namespace))
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
