package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// kubeletImageFsConfig gives the kubelet an imagefs.available eviction
// threshold of 30% (the store's filesystem past 70% used), and lets its
// reclaim remove an image however young (1 ms: zero is the default, 2 min); the other thresholds stay out of
// the way of a shared machine.
const kubeletImageFsConfig = `evictionHard:
  imagefs.available: "30%"
  imagefs.inodesFree: "1%"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  memory.available: "1Mi"
evictionPressureTransitionPeriod: 0s
imageMinimumGCAge: 1ms
`

// TestKubeletImageFsReclaim: static pods cycle through
// more ModelPack image volumes than the node's image filesystem (the
// store's, a 256 MiB tmpfs) holds, under an imagefs.available eviction
// threshold, while one pod keeps running. Every pod starts and reads exact
// weights; past the threshold the kubelet reclaims the unused weight images
// (weightsnapd's ImageFsInfo names the store's filesystem, their sizes
// include the artifacts'), and the store gives their bytes back, so the
// filesystem comes back under the threshold; the running pod keeps its
// weights and no pod is evicted.
func TestKubeletImageFsReclaim(t *testing.T) {
	const threshold = 70 // percent used: imagefs.available 30%
	c := startCRINodeWith(t, harness.WeightsnapdOptions{StoreTmpfs: "256m",
		// The store's own watermark stays off: the kubelet reclaims; what it
		// removes is evicted down to 50%.
		Store: "low_watermark_percent = 50\n"})
	type model struct {
		ref   string
		files map[string]string
	}
	var models []model
	for i := range 7 {
		dir, _, _ := ociCheckpoint(t, "40MiB", 2, "--seed", fmt.Sprint(4000+i))
		ref := c.reg.Ref(fmt.Sprintf("models/cycle%d:v1", i))
		models = append(models, model{ref: ref, files: orasPushModelPack(t, dir, ref, "raw")})
	}
	used := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(c.ws.Root, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks-st.Bfree) * 100 / int64(st.Blocks)
	}
	k := harness.StartKubelet(t, harness.KubeletOptions{Runtime: c.ctd, ImageService: c.ws.CRI, Config: kubeletImageFsConfig})
	podID := func(pod string) string {
		return strings.TrimSpace(crictl(t, c.ctd, "ps", "-q", "--label", "io.kubernetes.pod.name="+pod+"-"+k.NodeName))
	}
	k.PodManifest(t, "keeper", staticPod("keeper", c.base, "/models/model", models[0].ref))
	checkSums(t, waitPodLog(t, c.ctd, "keeper-"+k.NodeName, "read-all"), &pushedArtifact{files: models[0].files})
	keeper := podID("keeper")

	reclaims := 0
	for i, m := range models[1:] {
		name := fmt.Sprint("cycle", i+1)
		k.PodManifest(t, name, staticPod(name, c.base, "/models/model", m.ref))
		checkSums(t, waitPodLog(t, c.ctd, name+"-"+k.NodeName, "read-all"), &pushedArtifact{files: m.files})
		// Its container stops (the kubelet's reclaim removes it with the
		// other unused containers before it removes images).
		k.RemovePodManifest(t, name)
		if err := testenv.Wait(150*time.Second, func() error {
			if id := podID(name); id != "" {
				return fmt.Errorf("container %s", id)
			}
			return nil
		}); err != nil {
			t.Fatalf("the kubelet left %v running after its manifest went", err)
		}
		if used() <= threshold {
			continue
		}
		// Past the threshold: the kubelet's eviction manager (every 10 s)
		// removes the unused images, and the store evicts their artifacts.
		reclaims++
		if err := testenv.Wait(90*time.Second, func() error {
			if u := used(); u > threshold {
				return fmt.Errorf("the store's filesystem is %d%% used", u)
			}
			return nil
		}); err != nil {
			du, _ := harness.Run(c.ws.Root, "du", "-ab", "--max-depth=2", ".")
			t.Fatalf("after pod %s: %v, past the kubelet's threshold of %d%%\n%s\n%s", name, err, threshold, du, harness.Tail(k.Proc.Log, 30))
		}
	}
	if reclaims == 0 {
		t.Fatalf("the store's filesystem never went past %d%%: the test proves nothing", threshold)
	}
	klog, err := os.ReadFile(k.Proc.Log)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's first try after a pull removes nothing (an image it has
	// not detected yet is younger than imageMinimumGCAge) and, finding only
	// critical (static) pods to evict, evicts none; a later try removes the
	// unused images and the pressure goes.
	if !strings.Contains(string(klog), "able to reduce resource pressure without evicting pods") {
		t.Fatalf("the kubelet never relieved the pressure by removing images:\n%s", harness.Tail(k.Proc.Log, 30))
	}
	if strings.Contains(string(klog), "evicted successfully") {
		t.Fatalf("the kubelet evicted a pod:\n%s", harness.Tail(k.Proc.Log, 30))
	}
	if logLine(t, c.ws.Proc.Log, "cri: store past the low watermark after an image removal: evicted", "") < 0 {
		t.Fatalf("the store evicted nothing the kubelet removed:\n%s", harness.Tail(c.ws.Proc.Log, 30))
	}
	// The running pod kept its container and its weights.
	if id := podID("keeper"); id != keeper {
		t.Fatalf("the running pod's container %s is now %q", keeper, id)
	}
	checkSums(t, crictl(t, c.ctd, "exec", keeper, "sh", "-c", "cd /models/model && sha256sum *"), &pushedArtifact{files: models[0].files})
	t.Logf("%d reclaims; the store's filesystem %d%% used at the end", reclaims, used())
}
