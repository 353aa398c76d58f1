package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/internal/testenv"
)

// Tools holds the absolute paths of the peers installed by test/e2e/deps.
type Tools struct {
	Bin string // the pinned bin directory
	// CNI is the directory of the CNI plugins nerdctl's default bridge network runs (bridge,
	// host-local, loopback, portmap, firewall, tuning), built beside Bin.
	CNI string

	// Built from the Go module proxy into Bin.
	Containerd, Ctr, Shim, Runc, Nerdctl, Crictl, Oras, Registry, Crane string
	// Kubelet is built from the Kubernetes source module (test/kubelet pins it) into Bin.
	Kubelet string

	// From Debian packages (found on PATH or in /usr/sbin, /sbin, /bin).
	Busybox, IP, Ping, Socat, Rsync, B3sum, FiInfo string
}

// BinDir returns the peers' bin directory: $WEIGHTSNAP_PEERS_BIN, or the one test/e2e/deps recorded
// in ${WEIGHTSNAP_PEERS:-$HOME/.cache/weightsnap/peers}/current.
func BinDir() (string, error) {
	if d := os.Getenv("WEIGHTSNAP_PEERS_BIN"); d != "" {
		return d, nil
	}
	root, err := peersRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "current"))
	if err != nil {
		return "", fmt.Errorf("peers not installed (run test/e2e/deps): %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// peersRoot is where test/e2e/deps installs: ${WEIGHTSNAP_PEERS:-$HOME/.cache/weightsnap/peers}.
func peersRoot() (string, error) {
	if root := os.Getenv("WEIGHTSNAP_PEERS"); root != "" {
		return root, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "weightsnap", "peers"), nil
}

// Peers returns the paths of all peers, skipping the test (see testenv.Skip) when any is missing.
func Peers(t testing.TB) *Tools {
	t.Helper()
	tools, err := findPeers()
	if err != nil {
		testenv.Skip(t, err.Error())
	}
	return tools
}

func findPeers() (*Tools, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	tl := &Tools{Bin: bin}
	var missing []string
	inBin := func(dst *string, name string) {
		p := filepath.Join(bin, name)
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, name)
			return
		}
		*dst = p
	}
	inBin(&tl.Containerd, "containerd")
	inBin(&tl.Ctr, "ctr")
	inBin(&tl.Shim, "containerd-shim-runc-v2")
	inBin(&tl.Runc, "runc")
	inBin(&tl.Nerdctl, "nerdctl")
	inBin(&tl.Crictl, "crictl")
	inBin(&tl.Oras, "oras")
	inBin(&tl.Registry, "registry")
	inBin(&tl.Crane, "crane")
	inBin(&tl.Kubelet, "kubelet")
	tl.CNI = filepath.Join(filepath.Dir(bin), "cni")
	for _, name := range []string{"bridge", "host-local", "loopback", "portmap", "firewall", "tuning"} {
		if !isExec(filepath.Join(tl.CNI, name)) {
			missing = append(missing, "cni/"+name)
		}
	}
	onSystem := func(dst *string, name, pkg string) {
		for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
			if p := filepath.Join(dir, name); isExec(p) {
				*dst = p
				return
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			*dst = p
			return
		}
		missing = append(missing, name+" (Debian "+pkg+")")
	}
	onSystem(&tl.Busybox, "busybox", "busybox-static")
	onSystem(&tl.IP, "ip", "iproute2")
	onSystem(&tl.Ping, "ping", "iputils-ping")
	onSystem(&tl.Socat, "socat", "socat")
	onSystem(&tl.Rsync, "rsync", "rsync")
	onSystem(&tl.B3sum, "b3sum", "b3sum")
	onSystem(&tl.FiInfo, "fi_info", "libfabric-bin")
	if len(missing) > 0 {
		return nil, errors.New("peers missing from " + bin + ": " + strings.Join(missing, ", ") +
			" (run test/e2e/deps as root)")
	}
	return tl, nil
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// pathEnv returns the environment with the peers' bin directory first on PATH.
func (tl *Tools) pathEnv(extra ...string) []string {
	env := []string{"PATH=" + tl.Bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// MkfsErofs is mkfs.erofs of the pinned erofs-utils in the bin directory, which containerd's erofs
// differ runs (on the PATH StartContainerd gives it). Like Cosign it is looked up apart from the
// other peers; a test that needs it skips without it.
func (tl *Tools) MkfsErofs(t testing.TB) string {
	t.Helper()
	p := filepath.Join(tl.Bin, "mkfs.erofs")
	if !isExec(p) {
		testenv.Skip(t, "mkfs.erofs missing from "+tl.Bin+" (run test/e2e/deps as root)")
	}
	return p
}

// Cosign is the pinned cosign CLI in the bin directory. It is looked up
// apart from the other peers (which every test needs) so that a bin
// directory installed before cosign was pinned still runs them; a test
// that needs cosign skips without it (testenv.Skip: fatal where WEIGHTSNAP_REQUIRE_ALL=1).
func (tl *Tools) Cosign(t testing.TB) string {
	t.Helper()
	p := filepath.Join(tl.Bin, "cosign")
	if !isExec(p) {
		testenv.Skip(t, "cosign missing from "+tl.Bin+" (run test/e2e/deps as root)")
	}
	return p
}
