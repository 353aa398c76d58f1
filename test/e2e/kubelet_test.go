package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestKubeletStaticPods: under the pinned kubelet,
// standalone, with containerd as its runtime and weightsnapd's CRI socket
// as its image service, two static pods whose images all come from the
// secured registry, whose password only the kubelet holds (config.json in
// its root directory; only the sandbox image is the node's own): one
// whose container is a weight image, one with a ModelPack artifact pushed
// by the oras CLI as an image volume. Both containers read every file with
// its digest, and both artifacts are leased while the pods run. Once the
// manifests are removed the pods go, and weightsnapd
// holds no lease on either artifact while the images stay; removing the
// images through the image service (as the kubelet's image garbage
// collection does) then works, and leases nothing.
func TestKubeletStaticPods(t *testing.T) {
	c := startCRINode(t)
	img, id, files := c.pushPrivateWeightImage(t, "kubelet", "8MiB")
	volume := c.sec.Ref("models/modelpack-kubelet:v1")
	volumeFiles := c.pushModelPack(t, "models/modelpack-kubelet:v1", "raw")

	k := harness.StartKubelet(t, harness.KubeletOptions{Runtime: c.ctd, ImageService: c.ws.CRI,
		Auths: map[string]string{c.sec.Host: c.user + ":" + c.pass}})
	k.PodManifest(t, "weights", staticPod("weights", img, "/llama", ""))
	// busybox too comes from the secured registry (pushPrivateWeightImage copied it there).
	k.PodManifest(t, "volume", staticPod("volume", c.sec.Ref("library/busybox:latest"), "/models/model", volume))
	checkSums(t, waitPodLog(t, c.ctd, "weights-"+k.NodeName, "read-all"), &pushedArtifact{files: files})
	checkSums(t, waitPodLog(t, c.ctd, "volume-"+k.NodeName, "read-all"), &pushedArtifact{files: volumeFiles})
	var list []struct {
		Digest string `json:"digest"`
	}
	if err := json.Unmarshal([]byte(wsWith(t, c.ws.Config, "ls", "--json").out), &list); err != nil || len(list) != 2 {
		t.Fatalf("weightsnapd's store: %v %+v, want the weight image's and the volume's artifacts", err, list)
	}
	// The pods' rootfs and image volume use the artifacts: both leased.
	for _, a := range list {
		if r := wsWith(t, c.ws.Config, "inspect", a.Digest); r.code != 0 || !strings.Contains(r.out, "weightsnapd: lease held true") {
			t.Fatalf("weightsnap inspect %s while its pod runs: exit %d\n%s%s", a.Digest, r.code, r.out, r.errOut)
		}
	}

	k.RemovePodManifest(t, "weights")
	k.RemovePodManifest(t, "volume")
	if err := testenv.Wait(150*time.Second, func() error {
		if pods, ctrs := crictl(t, c.ctd, "pods", "-q"), crictl(t, c.ctd, "ps", "-a", "-q"); pods != "" || ctrs != "" {
			return fmt.Errorf("pods %q and containers %q", pods, ctrs)
		}
		return nil
	}); err != nil {
		t.Fatalf("the kubelet left %v after their manifests went", err)
	}

	// The images stay (a kubelet removes none on its own); what used the artifacts went.
	noLease := func(when string) {
		t.Helper()
		for _, a := range list {
			if err := testenv.Wait(60*time.Second, func() error {
				r := wsWith(t, c.ws.Config, "inspect", a.Digest)
				if r.code != 0 {
					t.Fatalf("weightsnap inspect %s: exit %d\n%s%s", a.Digest, r.code, r.out, r.errOut)
				}
				if strings.Contains(r.out, "weightsnapd: lease held") {
					return errors.New(r.out)
				}
				return nil
			}); err != nil {
				t.Fatalf("weightsnapd still holds %s %s: %v", a.Digest, when, err)
			}
		}
	}
	noLease("after its pod went")
	if out, err := c.ctd.Crictl("--image-endpoint", "unix://"+c.ws.CRI, "inspecti", img); err != nil {
		t.Fatalf("the weight image %s went with its pod: %v\n%s", img, err, out)
	}
	// Removing the images (as the kubelet's image garbage collection does) works, and leases nothing.
	crictl(t, c.ctd, "--image-endpoint", "unix://"+c.ws.CRI, "rmi", img, volume)
	if out, err := c.ctd.Crictl("--image-endpoint", "unix://"+c.ws.CRI, "inspecti", img); err == nil {
		t.Fatalf("the weight image %s is left after rmi:\n%s", img, out)
	}
	noLease("after its image went")
	if !strings.Contains(list[0].Digest+list[1].Digest, strings.TrimPrefix(id, "sha256:")) {
		t.Fatalf("weightsnapd's store lacks the weight image's artifact %s: %+v", id, list)
	}
	c.noPassword(t)
}

// staticPod is a host-network pod manifest whose container (image) reads
// every file in dir and sleeps; volume, when set, is an image volume at
// /models. It goes within a second of its manifest.
func staticPod(name, image, dir, volume string) string {
	var mounts, volumes string
	if volume != "" {
		mounts = `, "volumeMounts": [{"name": "w", "mountPath": "/models", "readOnly": true}]`
		volumes = fmt.Sprintf(`, "volumes": [{"name": "w", "image": {"reference": %q, "pullPolicy": "IfNotPresent"}}]`, volume)
	}
	return fmt.Sprintf(`{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": %q, "namespace": "default"},
  "spec": {
    "hostNetwork": true,
    "terminationGracePeriodSeconds": 1,
    "containers": [{"name": "reader", "image": %q,
      "command": ["sh", "-c", "cd %s && sha256sum * && echo read-all; exec sleep 3600"]%s}]%s
  }
}`, name, image, dir, mounts, volumes)
}

// waitPodLog polls the log of the container of the CRI pod named pod
// until it holds want, and returns it.
func waitPodLog(t *testing.T, ctd *harness.Containerd, pod, want string) string {
	t.Helper()
	var logs string
	err := testenv.Wait(120*time.Second, func() error {
		if id := strings.Fields(crictl(t, ctd, "ps", "-a", "-q", "--label", "io.kubernetes.pod.name="+pod)); len(id) > 0 {
			logs, _ = ctd.Crictl("logs", id[0])
		}
		if !strings.Contains(logs, want) {
			return fmt.Errorf("the log of pod %s lacks %q: %q", pod, want, logs)
		}
		return nil
	})
	if err != nil {
		ps, _ := ctd.Crictl("ps", "-a")
		t.Fatalf("%v\n%s", err, ps)
	}
	return logs
}

// TestKubeletWeightsnapdKilled: weightsnapd is
// killed (kill -9) while the kubelet runs a pod of a weight image. The
// running container keeps reading its weights; a pull through the image
// service fails, naming weightsnapd's socket, while weightsnapd is down; a
// static pod added meanwhile runs once weightsnapd is back; and nothing is
// pulled twice: each artifact is fetched once, by the CRI pull of its
// image (with the pod's credentials), and the restarted daemon takes the
// first artifact's lease again from the store, its Prepares fetching none.
func TestKubeletWeightsnapdKilled(t *testing.T) {
	c := startCRINode(t)
	img, id, files := c.pushPrivateWeightImage(t, "survivor", "8MiB")
	img2, id2, files2 := c.pushPrivateWeightImage(t, "latecomer", "6MiB") // another artifact
	k := harness.StartKubelet(t, harness.KubeletOptions{Runtime: c.ctd, ImageService: c.ws.CRI,
		Auths: map[string]string{c.sec.Host: c.user + ":" + c.pass}})
	k.PodManifest(t, "survivor", staticPod("survivor", img, "/llama", ""))
	checkSums(t, waitPodLog(t, c.ctd, "survivor-"+k.NodeName, "read-all"), &pushedArtifact{files: files})

	c.ws.Proc.Kill()
	cid := strings.Fields(crictl(t, c.ctd, "ps", "-q", "--label", "io.kubernetes.pod.name=survivor-"+k.NodeName))
	if len(cid) != 1 {
		t.Fatalf("survivor's containers: %v", cid)
	}
	checkSums(t, crictl(t, c.ctd, "exec", cid[0], "sh", "-c", "cd /llama && sha256sum *"), &pushedArtifact{files: files})
	if out, err := c.pull(c.user+":"+c.pass, img2); err == nil || !strings.Contains(err.Error(), c.ws.CRI) {
		t.Fatalf("a pull while weightsnapd is down: %v\n%s", err, out)
	}
	k.PodManifest(t, "latecomer", staticPod("latecomer", img2, "/llama", ""))
	// The kubelet tries, and fails, while weightsnapd is down: it logs the
	// pod's sync failing on one of weightsnapd's sockets (the snapshotter's,
	// through containerd, or the image service's).
	testenv.Eventually(t, 60*time.Second, func() bool {
		raw, _ := os.ReadFile(k.Proc.Log)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "Error syncing pod") && strings.Contains(line, "latecomer-"+k.NodeName) &&
				(strings.Contains(line, c.ws.Socket) || strings.Contains(line, c.ws.CRI)) {
				return true
			}
		}
		return false
	}, "the kubelet did not try the latecomer's pod while weightsnapd was down")

	c.ws.Restart(t)
	checkSums(t, waitPodLog(t, c.ctd, "latecomer-"+k.NodeName, "read-all"), &pushedArtifact{files: files2})
	checkSums(t, crictl(t, c.ctd, "exec", cid[0], "sh", "-c", "cd /llama && sha256sum *"), &pushedArtifact{files: files})
	c.waitMetric(t, "weightsnap_snapshotter_leases_held", 2, 30*time.Second)
	if got := c.metric(t, `weightsnap_snapshotter_prepares_total{layer="weight",outcome="fetched"}`); got != 0 {
		t.Fatalf("the restarted weightsnapd's Prepares fetched %v weight layers, want 0 (the CRI pull fetched the latecomer's)", got)
	}
	for _, a := range []string{id, id2} {
		if n := criFetches(t, c.ws.Proc.Log, a); n != 1 {
			t.Fatalf("the CRI pulls fetched %s %d times, want once\n%s", a, n, harness.Tail(c.ws.Proc.Log, 30))
		}
	}
}

// criFetches counts the log lines of weightsnapd (all its runs) saying
// that a CRI pull fetched the artifact id as a weight layer's.
func criFetches(t *testing.T, log, id string) int {
	t.Helper()
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		var e struct{ Msg, ID, Outcome string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "cri: weights of an image resolved with the pull's credentials" &&
			e.ID == id && e.Outcome == "fetched" {
			n++
		}
	}
	return n
}
