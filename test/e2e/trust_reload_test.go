package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// reloadWait bounds how long a test waits for weightsnapd to log a reload.
const reloadWait = time.Minute

// waitPolicyLog waits until weightsnapd's log holds n lines with msg and
// the policy_digest of content.
func waitPolicyLog(t *testing.T, ws *harness.Weightsnapd, msg, content string, n int) {
	t.Helper()
	key := fmt.Sprintf(`"policy_digest":%q`, digest.FromString(content))
	count := func() int {
		raw, _ := os.ReadFile(ws.Proc.Log)
		c := 0
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, msg) && strings.Contains(l, key) {
				c++
			}
		}
		return c
	}
	testenv.Eventually(t, reloadWait, func() bool { return count() >= n }, "weightsnapd logged %q with %s %d times, want %d\n%s", msg, key, count(), n, harness.Tail(ws.Proc.Log, 20))
}

// TestTrustPolicyReload: weightsnapd applies its policy file, tightened in
// place, to a later Prepare (nerdctl run) and CRI pull without a restart,
// and SIGHUP reads it again. A broken edit keeps the tightened policy, and
// the daemon's log, its metrics and weightsnapd config check say so.
func TestTrustPolicyReload(t *testing.T) {
	var policy, scope string
	accept := `{"default": [{"type": "insecureAcceptAnything"}]}`
	n := startTrustNode(t, func(reg *harness.Registry) string {
		scope = reg.Ref("models")
		policy = filepath.Join(t.TempDir(), "policy.json")
		writeJSON(t, policy, accept)
		return policy
	})
	reject := fmt.Sprintf(`{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {%q: [{"type": "reject"}]}}}`, scope)
	broken := `{"default": [`
	type built struct {
		a   *pushedArtifact
		img string
	}
	arts := map[string]*built{}
	for i, name := range []string{"before", "tightened", "broken"} {
		a := n.pushArtifact(t, name, fmt.Sprintf("%dMiB", i+1), 1)
		a.ref = pinned(t, a.ref)
		arts[name] = &built{a: a, img: n.buildImage(t, name, "/models/x", a)}
	}
	crictl(t, n.ctd, "pull", n.base)
	criPull := func(ref string) (string, error) {
		return n.ctd.Crictl("--image-endpoint", "unix://"+n.ws.CRI, "pull", ref)
	}
	refused := func(t *testing.T, name string) {
		t.Helper()
		out, runErr := n.run(arts[name].img, "true")
		criOut, criErr := criPull(arts[name].a.ref)
		for what, err := range map[string]error{"weightsnapd's Prepare (nerdctl run)": runErr, "the CRI pull": criErr} {
			if err == nil || !strings.Contains(err.Error(), scope) || !strings.Contains(err.Error(), "refuses it") {
				t.Fatalf("%s of %s: %v, want a refusal naming scope %s\n%s%s", what, name, err, scope, out, criOut)
			}
		}
	}

	if out, err := n.run(arts["before"].img, "sh", "-c", "cd /models/x && sha256sum *"); err != nil {
		t.Fatalf("nerdctl run under the first policy: %v\n%s", err, out)
	} else {
		checkSums(t, out, arts["before"].a)
	}

	writeJSON(t, policy, reject) // in place: the same inode
	waitPolicyLog(t, n.ws, "trust policy reloaded", reject, 1)
	refused(t, "tightened")

	if err := n.ws.Proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitPolicyLog(t, n.ws, "trust policy reloaded", reject, 2)

	writeJSON(t, policy, broken)
	waitPolicyLog(t, n.ws, "trust policy not reloaded", broken, 1)
	refused(t, "broken")
	m, err := n.ws.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"weightsnap_trust_policy_reload_errors_total 1\n", "weightsnap_trust_policy_last_reload_success 0\n"} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics after a broken edit: no %q", want)
		}
	}
	out, err := exec.Command(harness.WeightsnapdBinary(), "--config", n.ws.Config, "config", "check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), policy) {
		t.Fatalf("weightsnapd config check of a broken policy: %v, want an error naming %s\n%s", err, policy, out)
	}
}
