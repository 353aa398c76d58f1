package e2e

import (
	"io"
	"net/http"
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
	bin := buildBuiltinContainerd(t)
	reg := harness.StartRegistry(t)
	ws := harness.NewWeightsnapConfig(t, harness.WeightsnapdOptions{Registries: []string{reg.Host}})
	metrics := harness.FreePort(t)
	ctd := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg, Binary: bin, ExtraConfig: `
[plugins."io.containerd.snapshotter.v1.weightsnap"]
  config_path = "` + ws.Config + `"

[plugins."io.containerd.server.v1.metrics"]
  address = "127.0.0.1:` + strconv.Itoa(metrics) + `"
`})
	n := &snapNode{reg: reg, ws: ws, ctd: ctd, base: harness.PushBusybox(t, reg)}
	w := n.pushWeightImage(t, "builtin", "16MiB", 2, "/models/x")

	plugins, err := ctd.Ctr("plugins", "ls", "id==weightsnap")
	if err != nil || !strings.Contains(plugins, "io.containerd.snapshotter.v1") || !strings.Contains(plugins, "ok") {
		t.Fatalf("ctr plugins ls: %v\n%s", err, plugins)
	}
	out, err := n.run(w.ref, "sh", "-c", "cd /models/x && sha256sum *")
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, out, w.pushedArtifact)
	n.noWeightBlobs(t, w.pushedArtifact)
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(metrics) + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(text), `weightsnap_snapshotter_prepares_total{layer="weight",outcome="fetched"} 1`) ||
		!strings.Contains(string(text), `weightsnap_build_info{goversion="go`) {
		t.Fatalf("containerd's metrics lack weightsnap's: %v\n%s", err, text)
	}
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
