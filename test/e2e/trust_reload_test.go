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
	n, policy, scope := startReloadNode(t, harness.WeightsnapdOptions{})
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

// tighten is a policy that rejects scope and accepts the rest.
func tighten(scope string) string {
	return fmt.Sprintf(`{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {%q: [{"type": "reject"}]}}}`, scope)
}

// acceptAll is a policy that accepts everything unverified.
const acceptAll = `{"default": [{"type": "insecureAcceptAnything"}]}`

// startReloadNode starts a trust node (with opts) whose policy file accepts
// anything until the test edits it in place; it returns the node, the file
// and the scope of the registry's models namespace.
func startReloadNode(t *testing.T, opts harness.WeightsnapdOptions) (n *snapNode, policy, scope string) {
	t.Helper()
	n = startTrustNodeOpts(t, opts, func(reg *harness.Registry) string {
		scope = reg.Ref("models")
		policy = filepath.Join(t.TempDir(), "policy.json")
		writeJSON(t, policy, acceptAll)
		return policy
	})
	return n, policy, scope
}

// TestTrustPolicyReloadRefill: an image whose artifact weightsnapd evicted
// for room (its weight snapshot emptied) is filled in again under the
// policy as it stands: tightened in place, its next container is refused
// naming the scope and the store does not take the artifact back; relaxed,
// it starts with its weights, refilled. No restart.
func TestTrustPolicyReloadRefill(t *testing.T) {
	const tmpfs = 144 << 20
	n, policy, scope := startReloadNode(t, harness.WeightsnapdOptions{StoreTmpfs: fmt.Sprint(tmpfs>>20, "m")}) // the watermark off: only the builds evict here
	var imgs []*weightImage
	for i := range 5 {
		imgs = append(imgs, n.pushWeightImage(t, fmt.Sprint("refill", i), "32MiB", 2, "/models/m", "--seed", fmt.Sprint(4800+i)))
	}
	read := func(img *weightImage) {
		t.Helper()
		out, err := n.run(img.ref, "sh", "-c", "cd /models/m && sha256sum *")
		if err != nil {
			t.Fatalf("nerdctl run of %s: %v\n%s", img.ref, err, harness.Tail(n.ws.Proc.Log, 30))
		}
		checkSums(t, out, img.pushedArtifact)
	}
	for _, img := range imgs {
		read(img)
	}
	if stored := storedIDs(t, n.ws); stored[imgs[0].hex] != 0 {
		t.Fatalf("the first image's artifact was not evicted (store: %v)", stored)
	}

	writeJSON(t, policy, tighten(scope)) // in place: the same inode
	waitPolicyLog(t, n.ws, "trust policy reloaded", tighten(scope), 1)
	out, err := n.run(imgs[0].ref, "true")
	if err == nil || !strings.Contains(err.Error(), scope) || !strings.Contains(err.Error(), "refuses it") {
		t.Fatalf("tightened: the refill of the evicted image: %v, want a refusal naming scope %s\n%s", err, scope, out)
	}
	if stored := storedIDs(t, n.ws); stored[imgs[0].hex] != 0 {
		t.Fatalf("tightened: the store took the refused artifact back (store: %v)", stored)
	}

	writeJSON(t, policy, acceptAll)
	waitPolicyLog(t, n.ws, "trust policy reloaded", acceptAll, 1)
	read(imgs[0])
	if logLine(t, n.ws.Proc.Log, "emptied weight snapshot filled in again", imgs[0].id) < 0 {
		t.Fatalf("no refill logged:\n%s", harness.Tail(n.ws.Proc.Log, 40))
	}
}

// TestTrustPolicyReloadPeer: weightsnapd's resolution from a weight peer
// applies the policy as it stands. Accepted, an image's artifact comes from
// the peer; tightened in place, the peer's unsigned artifact of another
// image is passed over (this source carries no signature), the registry's
// is refused, naming the scope, and the store does not hold it; relaxed, it
// comes from the peer. No restart.
func TestTrustPolicyReloadPeer(t *testing.T) {
	harness.Peers(t)
	type served struct{ src, root, id string }
	var arts []served
	var peers []string
	for i, size := range []string{"3MiB", "4MiB"} {
		src, root, id := ociCheckpoint(t, size, 1, "--seed", fmt.Sprint(4900+i))
		addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		p := harness.StartProcess(t, harness.TempDir(t), "peer-serve", nil, weightsnapBin(t), "--root", root, "--config", "",
			"peer", "serve", "--listen", addr, "--allow-unauthenticated")
		if err := testenv.Wait(30*time.Second, func() error {
			if p.Exited() {
				return testenv.Final(fmt.Errorf("peer serve exited"))
			}
			if r := ws(t, t.TempDir(), "peer", "ls", addr); r.code != 0 {
				return fmt.Errorf("%s", r.errOut)
			}
			return nil
		}); err != nil {
			t.Fatalf("peer serve: %v\n%s", err, harness.Tail(p.Log, 20))
		}
		arts, peers = append(arts, served{src, root, id}), append(peers, addr)
	}
	n, policy, scope := startReloadNode(t, harness.WeightsnapdOptions{ExtraConfig: fmt.Sprintf("[peer]\npeers = [%q, %q]\n", peers[0], peers[1])})
	var imgs []*weightImage
	for i, a := range arts {
		p := n.pushImported(t, fmt.Sprint("peer", i), a.src, a.root, a.id)
		imgs = append(imgs, &weightImage{ref: n.buildImage(t, fmt.Sprint("peer", i), "/models/m", p), pushedArtifact: p})
	}
	fromPeer := func(img *weightImage) {
		t.Helper()
		out, err := n.run(img.ref, "sh", "-c", "cd /models/m && sha256sum *")
		if err != nil {
			t.Fatalf("nerdctl run of %s: %v\n%s", img.ref, err, harness.Tail(n.ws.Proc.Log, 30))
		}
		checkSums(t, out, img.pushedArtifact)
		raw, err := os.ReadFile(n.ws.Proc.Log)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, `"msg":"prepare weight layer"`) && strings.Contains(l, img.id) && strings.Contains(l, `"source":"peer`) {
				return
			}
		}
		t.Fatalf("the weights of %s did not come from the peer:\n%s", img.ref, harness.Tail(n.ws.Proc.Log, 30))
	}

	fromPeer(imgs[0])

	writeJSON(t, policy, tighten(scope)) // in place: the same inode
	waitPolicyLog(t, n.ws, "trust policy reloaded", tighten(scope), 1)
	out, err := n.run(imgs[1].ref, "true")
	if err == nil || !strings.Contains(err.Error(), scope) || !strings.Contains(err.Error(), "refuses it") {
		t.Fatalf("tightened: an image whose weights a peer serves: %v, want a refusal naming scope %s\n%s", err, scope, out)
	}
	raw, err := os.ReadFile(n.ws.Proc.Log)
	if err != nil {
		t.Fatal(err)
	}
	peerRefused := false
	for _, l := range strings.Split(string(raw), "\n") {
		peerRefused = peerRefused || (strings.Contains(l, `"source":"peer"`) && strings.Contains(l, `"kind":"unsigned"`) &&
			strings.Contains(l, scope) && strings.Contains(l, "this source carries no signature"))
	}
	if !peerRefused {
		t.Fatalf("tightened: weightsnapd did not log the peer's refusal:\n%s", harness.Tail(n.ws.Proc.Log, 30))
	}
	if stored := storedIDs(t, n.ws); stored[imgs[1].hex] != 0 {
		t.Fatalf("tightened: the store holds the peer's refused artifact (store: %v)", stored)
	}

	writeJSON(t, policy, acceptAll)
	waitPolicyLog(t, n.ws, "trust policy reloaded", acceptAll, 1)
	fromPeer(imgs[1])
}
