package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"golang.org/x/sys/unix"
)

// WeightsnapdBinary returns the weightsnapd binary: $WEIGHTSNAPD if set, else bin/weightsnapd at the
// module root (built by `make build`, which `make test` and `make e2e` run first). It returns "" when
// neither exists.
func WeightsnapdBinary() string {
	if p := os.Getenv("WEIGHTSNAPD"); p != "" {
		if isExec(p) {
			return p
		}
		return ""
	}
	root, err := ModuleRoot()
	if err != nil {
		return ""
	}
	if p := filepath.Join(root, "bin", "weightsnapd"); isExec(p) {
		return p
	}
	return ""
}

// ModuleRoot is the directory of the go.mod above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

// WeightsnapdOptions configures StartWeightsnapd.
type WeightsnapdOptions struct {
	// Registries are the registry hosts weight images' pointers may name ([resolve] registries);
	// the daemon talks plain HTTP to them.
	Registries []string
	// Mode is [snapshotter] mode: "" (required) or "preferred".
	Mode string
	// RegistryConfigPath is [resolve] registry_config_path, the registry
	// host directory; "" leaves the default.
	RegistryConfigPath string
	// ExtraConfig is appended to the generated config.toml; it must not repeat the tables the
	// harness writes (root, [resolve], [snapshotter], [cri], [metrics], [store]).
	ExtraConfig string
	// Store is the lines of the [store] table. The harness turns each watermark off
	// (high_watermark_percent, low_watermark_percent = 0) unless they set it: how full the
	// machine's disk is must not evict a test's artifacts.
	Store string
	// CRIUpstream is the containerd socket the daemon's CRI image service (on CRI, in the
	// daemon's directory) forwards to; containerd starts after the daemon, so a test names a path
	// and links it to containerd's socket once that runs (the daemon connects at its first call).
	// "" leaves it the default, which no test serves.
	CRIUpstream string
	// StoreTmpfs, when set, is the size of a tmpfs (e.g. "1g") mounted at the store root before
	// the daemon starts: the store and the snapshot root on a small filesystem of their own.
	StoreTmpfs string
	// NetNS, when set, runs the daemon in this network namespace (NS.Enter: the host's mounts); its
	// metrics address is 127.0.0.1 there.
	NetNS *NS
}

// repairRetryMax is [snapshotter] retry_max_seconds in tests: repairs retry within seconds.
const repairRetryMax = 2

// Weightsnapd is a running weightsnapd with its own store, snapshot root and socket.
type Weightsnapd struct {
	Dir          string // everything lives under here
	Root         string // the store root
	SnapshotRoot string // the snapshotter's root: Root/snapshots
	Socket       string // the snapshots API socket
	Control      string // the control API socket (weightsnap mount, umount, inspect)
	CRI          string // the CRI image service's socket
	Config       string // config.toml path
	MetricsURL   string // http://127.0.0.1:PORT/metrics
	Proc         *Proc
	netns        *NS
}

// StartWeightsnapd starts weightsnapd (root needed) with a generated configuration in a fresh
// harness directory (logs in weightsnapd.log there) and waits for its sd_notify READY=1. It skips
// (see testenv.Skip) when the binary is not built.
func StartWeightsnapd(t testing.TB, opts WeightsnapdOptions) *Weightsnapd {
	t.Helper()
	testenv.RequireRoot(t, "running weightsnapd")
	bin := WeightsnapdBinary()
	if bin == "" {
		testenv.Skip(t, "bin/weightsnapd is not built (run make build, or set WEIGHTSNAPD)")
	}
	w := NewWeightsnapConfig(t, opts)
	w.netns = opts.NetNS
	if opts.StoreTmpfs != "" {
		if err := os.MkdirAll(w.Root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", w.Root, "tmpfs", 0, "size="+opts.StoreTmpfs); err != nil {
			t.Fatalf("tmpfs for the store: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(w.Root, unix.MNT_DETACH) })
	}
	w.Proc = w.start(t, bin)
	return w
}

// NewWeightsnapConfig writes the configuration StartWeightsnapd runs the daemon with, in a fresh
// harness directory, and starts nothing: for a containerd with weightsnap built in, which reads
// the same file (Proc stays nil).
func NewWeightsnapConfig(t testing.TB, opts WeightsnapdOptions) *Weightsnapd {
	t.Helper()
	dir := TempDir(t)
	w := &Weightsnapd{Dir: dir, Root: filepath.Join(dir, "root"), Socket: filepath.Join(dir, "ws.sock"),
		Control: filepath.Join(dir, "control.sock"), CRI: filepath.Join(dir, "cri.sock"), Config: filepath.Join(dir, "config.toml")}
	w.SnapshotRoot = filepath.Join(w.Root, "snapshots")
	metrics := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	w.MetricsURL = "http://" + metrics + "/metrics"
	regs := make([]string, len(opts.Registries))
	for i, r := range opts.Registries {
		regs[i] = fmt.Sprintf("%q", r)
	}
	upstream := ""
	if opts.CRIUpstream != "" {
		upstream = fmt.Sprintf("upstream = %q\n", opts.CRIUpstream)
	}
	mode := opts.Mode
	if mode == "" {
		mode = "required"
	}
	storeTable := opts.Store
	for _, key := range []string{"high_watermark_percent", "low_watermark_percent"} {
		if !strings.Contains(storeTable, key) {
			storeTable += key + " = 0\n"
		}
	}
	hostsDir := ""
	if opts.RegistryConfigPath != "" {
		hostsDir = fmt.Sprintf("registry_config_path = %q\n", opts.RegistryConfigPath)
	}
	writeFile(t, w.Config, fmt.Sprintf(`root = %q

[resolve]
registries = [%s]
plain_http = true
%s
[snapshotter]
address = %q
control_address = %q
mode = %q
retry_max_seconds = %d

[cri]
address = %q
unpack_check_seconds = 1
%s
[metrics]
address = %q

[store]
%s
%s
`, w.Root, strings.Join(regs, ", "), hostsDir, w.Socket, w.Control, mode, repairRetryMax, w.CRI, upstream, metrics, storeTable, opts.ExtraConfig))
	return w
}

// start runs the daemon and waits for READY=1 on a notify socket of its own.
func (w *Weightsnapd) start(t testing.TB, bin string) *Proc {
	t.Helper()
	notify := filepath.Join(w.Dir, fmt.Sprintf("notify-%s.sock", randHex(3)))
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				ready <- err
				return
			}
			if strings.Contains(string(buf[:n]), "READY=1") {
				ready <- nil
				return
			}
		}
	}()
	argv := []string{bin, "--config", w.Config, "--log-level", "debug"}
	if w.netns != nil {
		argv = w.netns.Enter(argv...)
	}
	p := StartProcess(t, w.Dir, "weightsnapd", append(os.Environ(), "NOTIFY_SOCKET="+notify), argv...)
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("weightsnapd notify socket: %v", err)
		}
	case <-p.Done():
		t.Fatalf("weightsnapd exited before it was ready: %v\n%s", p.Err(), Tail(p.Log, 40))
	case <-time.After(60 * time.Second):
		t.Fatalf("weightsnapd did not notify READY=1 in 60s\n%s", Tail(p.Log, 40))
	}
	return p
}

// Restart stops the daemon (SIGTERM) and starts it again with the same configuration.
func (w *Weightsnapd) Restart(t testing.TB) {
	t.Helper()
	w.Proc.Stop()
	w.Proc = w.start(t, WeightsnapdBinary())
}

// Kill kills the daemon with SIGKILL (a crash: no cleanup runs) and starts it again with the
// same configuration.
func (w *Weightsnapd) Kill(t testing.TB) {
	t.Helper()
	w.Proc.Kill()
	w.Proc = w.start(t, WeightsnapdBinary())
}

// SetMode rewrites [snapshotter] mode in the configuration; Restart or Kill applies it.
func (w *Weightsnapd) SetMode(t testing.TB, mode string) {
	t.Helper()
	raw, err := os.ReadFile(w.Config)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^mode = ".*"$`)
	writeFile(t, w.Config, re.ReplaceAllString(string(raw), fmt.Sprintf("mode = %q", mode)))
}

// Metrics returns the daemon's Prometheus metrics, as text.
func (w *Weightsnapd) Metrics() (string, error) {
	resp, err := http.Get(w.MetricsURL)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("metrics: %s", resp.Status)
	}
	return string(b), err
}

// ContainerdSnippet is the contrib containerd snippet (contrib/containerd/weightsnap.toml, the file
// the README installs) with its socket and root replaced by this daemon's, written into the
// daemon's directory for ContainerdOptions.Imports.
func (w *Weightsnapd) ContainerdSnippet(t testing.TB) string {
	t.Helper()
	return w.ContainerdSnippetFile(t, "weightsnap.toml")
}

// ContainerdSnippetFile is ContainerdSnippet of another file of contrib/containerd. The file must
// name the default socket /run/weightsnap/snapshotter.sock and root /var/lib/weightsnap/snapshots.
func (w *Weightsnapd) ContainerdSnippetFile(t testing.TB, name string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "contrib", "containerd", name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for old, repl := range map[string]string{`"/run/weightsnap/snapshotter.sock"`: fmt.Sprintf("%q", w.Socket),
		`"/var/lib/weightsnap/snapshots"`: fmt.Sprintf("%q", w.SnapshotRoot)} {
		if !strings.Contains(s, old) {
			t.Fatalf("contrib/containerd/%s does not name %s", name, old)
		}
		s = strings.ReplaceAll(s, old, repl)
	}
	p := filepath.Join(w.Dir, "containerd-"+name)
	writeFile(t, p, s)
	return p
}
