package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// createVolumePod creates, in a pod of its own, a container of image with
// the image volume volume at /models, and starts it; it returns the first
// failure of crictl, nil when the container started.
func createVolumePod(t *testing.T, ctd *harness.Containerd, name, image, volume string) error {
	t.Helper()
	dir := t.TempDir()
	pod := hostNetworkPod(t, dir, name)
	ctr := filepath.Join(dir, "container.json")
	writeJSON(t, ctr, fmt.Sprintf(`{
  "metadata": {"name": "reader"},
  "image": {"image": %q},
  "command": ["sleep", "3600"],
  "mounts": [{"container_path": "/models", "readonly": true, "image": {"image": %q}}],
  "log_path": "reader.log",
  "linux": {"security_context": {"seccomp": {"profile_type": 1}}}
}`, image, volume))
	podID := crictl(t, ctd, "runp", pod)
	cid, err := ctd.Crictl("create", podID, ctr, pod)
	if err != nil {
		return err
	}
	_, err = ctd.Crictl("start", strings.TrimSpace(cid))
	return err
}

// TestTrustPolicyAtEveryMount: a container (nerdctl run) and a pod's image
// volume (the CRI) over weight snapshots that exist already, of an image
// unpacked and an artifact pulled while the policy accepted them, are
// refused naming the scope once the policy file is tightened in place, as
// is a CRI pull of the artifact the store holds, and start again once it is
// relaxed, without a restart: each mount applies the policy as it stands to
// the store's recorded verification.
func TestTrustPolicyAtEveryMount(t *testing.T) {
	n, policy, scope := startReloadNode(t, harness.WeightsnapdOptions{})
	reject := fmt.Sprintf(`{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {%q: [{"type": "reject"}]}}}`, scope)
	a := n.pushArtifact(t, "unpacked", "2MiB", 1)
	a.ref = pinned(t, a.ref)
	img := n.buildImage(t, "unpacked", "/models/x", a)
	crictl(t, n.ctd, "pull", n.base)
	if out, err := n.ctd.Crictl("--image-endpoint", "unix://"+n.ws.CRI, "pull", a.ref); err != nil {
		t.Fatalf("CRI pull of %s: %v\n%s", a.ref, err, out)
	}
	starts := func(t *testing.T, when string) {
		t.Helper()
		out, err := n.run(img, "sh", "-c", "cd /models/x && sha256sum *")
		if err != nil {
			t.Fatalf("%s: nerdctl run of %s: %v\n%s", when, img, err, out)
		}
		checkSums(t, out, a)
		checkSums(t, runReaderPod(t, n.ctd, readerPod{name: "reader-" + when, image: n.base, dir: "/models/model", volume: a.ref}), a)
	}

	starts(t, "accepted")

	writeJSON(t, policy, reject) // in place: the same inode
	waitPolicyLog(t, n.ws, "trust policy reloaded", reject, 1)
	out, runErr := n.run(img, "true")
	volErr := createVolumePod(t, n.ctd, "refused", n.base, a.ref)
	criOut, criErr := n.ctd.Crictl("--image-endpoint", "unix://"+n.ws.CRI, "pull", a.ref)
	out += criOut
	for what, err := range map[string]error{"nerdctl run of the unpacked image": runErr, "a pod's image volume of the pulled artifact": volErr,
		"the CRI pull of the artifact the store holds": criErr} {
		if err == nil || !strings.Contains(err.Error(), scope) || !strings.Contains(err.Error(), "refuses it") {
			t.Fatalf("tightened: %s: %v, want a refusal naming scope %s\n%s%s", what, err, scope, out, harness.Tail(n.ws.Proc.Log, 20))
		}
	}

	writeJSON(t, policy, acceptAll)
	waitPolicyLog(t, n.ws, "trust policy reloaded", acceptAll, 1)
	starts(t, "relaxed")
}
