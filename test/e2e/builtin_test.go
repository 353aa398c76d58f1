package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestBuiltinContainerd: a containerd built with
// weightsnap's snapshotter compiled in (test/e2e/containerd-weightsnap:
// containerd's builtins plus cmd/weightsnapd/plugin) pulls and runs a weight
// image through it, with no weightsnapd running: the container reads every
// weight file with its source digest, and the snapshotter's metrics are
// among containerd's.
func TestBuiltinContainerd(t *testing.T) {
	testenv.RequireRoot(t, "the builtin containerd")
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	n := startBuiltinNode(t, reg, buildBuiltinContainerd(t), harness.PushBusybox(t, reg))
	w := n.pushWeightImage(t, "builtin", "16MiB", 2, "/models/x")

	plugins, err := n.ctd.Ctr("plugins", "ls", "id==weightsnap")
	if err != nil || !strings.Contains(plugins, "io.containerd.snapshotter.v1") || !strings.Contains(plugins, "ok") {
		t.Fatalf("ctr plugins ls: %v\n%s", err, plugins)
	}
	out, err := n.run(w.ref, "sh", "-c", "cd /models/x && sha256sum *")
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, out, w.pushedArtifact)
	n.noWeightBlobs(t, w.pushedArtifact)
	text, err := n.ws.Metrics()
	if err != nil || !strings.Contains(text, `weightsnap_snapshotter_prepares_total{layer="weight",outcome="fetched"} 1`) ||
		!strings.Contains(text, `weightsnap_build_info{goversion="go`) {
		t.Fatalf("containerd's metrics lack weightsnap's: %v\n%s", err, text)
	}
}

// startBuiltinNode starts the containerd bin, built with weightsnap's
// snapshotter compiled in, with a weightsnap configuration of its own
// pulling from reg; the node's ws runs no daemon (Proc is nil) and its
// MetricsURL is containerd's, which serves the snapshotter's metrics.
func startBuiltinNode(t *testing.T, reg *harness.Registry, bin, base string) *snapNode {
	t.Helper()
	ws := harness.NewWeightsnapConfig(t, harness.WeightsnapdOptions{Registries: []string{reg.Host}})
	metrics := harness.FreePort(t)
	ws.MetricsURL = "http://127.0.0.1:" + strconv.Itoa(metrics) + "/v1/metrics"
	ctd := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg, Binary: bin, ExtraConfig: `
[plugins."io.containerd.snapshotter.v1.weightsnap"]
  config_path = "` + ws.Config + `"

[plugins."io.containerd.server.v1.metrics"]
  address = "127.0.0.1:` + strconv.Itoa(metrics) + `"
`})
	return &snapNode{reg: reg, ws: ws, ctd: ctd, base: base}
}

// buildBuiltinContainerd builds test/e2e/containerd-weightsnap into a
// temporary directory (the Go build cache makes a rebuild take seconds).
func buildBuiltinContainerd(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "containerd-weightsnap")
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", bin, "./test/e2e/containerd-weightsnap")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build containerd with weightsnap built in: %v\n%s", err, out)
	}
	t.Logf("built containerd with weightsnap compiled in: %v", time.Since(start).Round(100*time.Millisecond))
	return bin
}
