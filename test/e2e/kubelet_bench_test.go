//go:build bench

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/weightsnap/weightsnap/test/benchrow"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestKubeletImageVolumeBench (make bench): a
// static pod under the pinned kubelet whose image volume is a ModelPack
// artifact (raw layers, pushed by the oras CLI), from the manifest's write
// to the first weight byte its container reads, beside the same files as an
// ordinary image (one uncompressed tar layer) as the image volume of the
// same pod on a node without weightsnap: containerd's CRI pulls it and
// unpacks it with its overlayfs snapshotter. One node per size, one local
// registry for both; weightsnap's store is warm (the artifact pulled once
// through the CRI socket, its image removed before every round, so the
// kubelet's pull goes through weightsnapd again), and every round's
// containerd for overlayfs is a new one that has never seen the ordinary
// image. Each round (BENCH_REPS, 5 by default) runs both contenders, in
// alternate order from round to round, and the disk's floor: the same bytes
// written to 4 new files and synced. Every figure is the median of the
// rounds with its min and max (test/benchrow). The sizes are
// WEIGHTSNAP_BENCH_KUBELET_SIZES (comma separated, default 2GiB,4GiB). It
// fails on errors only, never on speed:
//
//	go test -tags bench -count=1 -timeout 60m -v -run '^TestKubeletImageVolumeBench$' ./test/e2e/
func TestKubeletImageVolumeBench(t *testing.T) {
	reps := benchrow.Reps()
	type row struct {
		size                 string
		disk, weightsnap, ov benchrow.Runs
	}
	var rows []row
	for _, size := range strings.Split(envOr("WEIGHTSNAP_BENCH_KUBELET_SIZES", "2GiB,4GiB"), ",") {
		t.Run(size, func(t *testing.T) {
			c := startCRINode(t)
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			wsOK(t, t.TempDir(), "dev", "synth", "--out", ckpt, "--size", size, "--shards", "4")
			bytes := dirBytes(t, ckpt)
			volume := c.reg.Ref("models/bench:v1")
			first := firstWeightFile(t, orasPushModelPack(t, ckpt, volume, "raw"))
			plain := pushTarImage(t, "", ckpt, "model", c.reg.Ref("apps/bench-tar:v1")) // files at /model, as the artifact's
			if err := os.RemoveAll(ckpt); err != nil {
				t.Fatal(err)
			}

			viaWS := []string{"--image-endpoint", "unix://" + c.ws.CRI}
			crictl(t, c.ctd, append(viaWS, "pull", volume)...)
			var stored []struct {
				Digest string `json:"digest"`
			}
			if err := json.Unmarshal([]byte(wsWith(t, c.ws.Config, "ls", "--json").out), &stored); err != nil || len(stored) != 1 {
				t.Fatalf("weightsnapd's store: %v, %d artifacts, want the volume's", err, len(stored))
			}
			// The store keeps the artifact when its image goes, however full
			// the disk (past the low watermark the removal would evict it).
			if r := wsWith(t, c.ws.Config, "pin", stored[0].Digest, "--reason", "the warm-store bench"); r.code != 0 {
				t.Fatalf("pin: exit %d\n%s", r.code, r.errOut)
			}
			r := row{size: size}
			// Each contender runs in a subtest of its own: the kubelet's
			// teardown, at the subtest's end, removes the pods it ran.
			weightsnap := func() {
				t.Run("weightsnap", func(t *testing.T) {
					crictl(t, c.ctd, append(viaWS, "rmi", volume)...)
					k := harness.StartKubelet(t, harness.KubeletOptions{Runtime: c.ctd, ImageService: c.ws.CRI})
					r.weightsnap = append(r.weightsnap, timeVolumePod(t, k, c.ctd, c.reg, volume, first))
				})
			}
			overlayfs := func() {
				t.Run("overlayfs", func(t *testing.T) {
					stock := harness.StartContainerd(t, harness.ContainerdOptions{Registry: c.reg})
					if out, err := stock.Crictl("inspecti", plain); err == nil {
						t.Fatalf("containerd holds the ordinary image before its pod:\n%s", out)
					}
					k := harness.StartKubelet(t, harness.KubeletOptions{Runtime: stock})
					r.ov = append(r.ov, timeVolumePod(t, k, stock, c.reg, plain, first))
				})
			}
			for i := range reps {
				t.Logf("%s: round %d of %d", size, i+1, reps)
				settle(t, c.reg)
				r.disk = append(r.disk, syncedWrite(t, t.TempDir(), bytes, 4))
				if i%2 == 0 {
					weightsnap()
					overlayfs()
				} else {
					overlayfs()
					weightsnap()
				}
			}
			rows = append(rows, r)
		})
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nkubelet static pod with an image volume: manifest written to the container's first weight byte\n")
	fmt.Fprintf(&out, "%d cores, median [min-max] of %d rounds, contenders in alternate order, one local registry; weightsnap: ModelPack artifact, warm store; overlayfs: the same files as one uncompressed tar layer, pulled and unpacked by a new stock containerd each round\n", runtime.NumCPU(), reps)
	fmt.Fprintf(&out, "ratios: median [worst-best the rounds allow]; disk floor: the same bytes written to 4 new files and synced\n")
	fmt.Fprintf(&out, "%-8s %-26s %20s   %-36s %s\n", "weights", "measure", "seconds", "over the disk floor", "overlayfs over weightsnap")
	for _, r := range rows {
		fmt.Fprintf(&out, "%-8s %-26s %20s\n", r.size, "disk floor (synced write)", r.disk.Format(2))
		fmt.Fprintf(&out, "%-8s %-26s %20s   %s\n", r.size, "weightsnap", r.weightsnap.Format(2), benchrow.Ratio(r.weightsnap, r.disk))
		fmt.Fprintf(&out, "%-8s %-26s %20s   %-36s %s\n", r.size, "overlayfs", r.ov.Format(2), benchrow.Ratio(r.ov, r.disk), benchrow.Ratio(r.ov, r.weightsnap))
	}
	fmt.Fprintf(&out, "goal: overlayfs over weightsnap >= 10x, and weightsnap flat from 2 to 4 GiB\n")
	for _, r := range rows {
		fmt.Fprintf(&out, "runs %s (s): disk %s | weightsnap %s | overlayfs %s\n", r.size, r.disk.List(2), r.weightsnap.List(2), r.ov.List(2))
	}
	fmt.Print(out.String())
}

// dirBytes is the total size of the regular files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var firstByteLine = regexp.MustCompile(`first-byte ([0-9.]+)|(first-byte-failed)`)

// timeVolumePod writes a static pod manifest whose busybox container (from
// reg, pulled first with reg's sandbox image, as a node that ran pods has
// them) mounts volume as an image volume at /models and reads the first byte
// of /models/model/file; it returns the seconds from the manifest's write to
// that read, on the kernel's uptime clock (shared with the container), once
// the pod has stopped after its manifest was removed (the kubelet's garbage
// collection, within a minute, removes its sandbox; the kubelet's teardown
// does otherwise).
func timeVolumePod(t *testing.T, k *harness.Kubelet, ctd *harness.Containerd, reg *harness.Registry, volume, file string) float64 {
	t.Helper()
	image := reg.Ref("busybox:latest")
	crictl(t, ctd, "pull", image)
	crictl(t, ctd, "pull", reg.Ref("pause:3.10"))
	const name = "bench"
	manifest := fmt.Sprintf(`{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": %q, "namespace": "default"},
  "spec": {
    "hostNetwork": true,
    "terminationGracePeriodSeconds": 1,
    "containers": [{"name": "reader", "image": %q,
      "command": ["sh", "-c", "if head -c 1 /models/model/%s >/dev/null; then read up idle </proc/uptime; echo first-byte $up; else echo first-byte-failed; fi; exec sleep 3600"],
      "volumeMounts": [{"name": "w", "mountPath": "/models", "readOnly": true}]}],
    "volumes": [{"name": "w", "image": {"reference": %q, "pullPolicy": "IfNotPresent"}}]
  }
}`, name, image, file, volume)
	settle(t, reg)
	start := uptime(t)
	k.PodManifest(t, name, manifest)

	pod := name + "-" + k.NodeName
	var read float64
	err := poll(10*time.Minute, func() error {
		ids := strings.Fields(crictl(t, ctd, "ps", "-a", "-q", "--label", "io.kubernetes.pod.name="+pod))
		if len(ids) == 0 {
			return errors.New("no container yet")
		}
		logs, _ := ctd.Crictl("logs", ids[0])
		m := firstByteLine.FindStringSubmatch(logs)
		switch {
		case m == nil:
			return fmt.Errorf("the container's log lacks its first byte: %q", logs)
		case m[2] != "":
			return backoff.Permanent(fmt.Errorf("the container could not read /models/model/%s", file))
		}
		v, err := strconv.ParseFloat(m[1], 64)
		read = v
		return err
	})
	if err != nil {
		ps, _ := ctd.Crictl("ps", "-a")
		t.Fatalf("pod %s: %v\n%s\n%s", pod, err, ps, harness.Tail(k.Proc.Log, 30))
	}
	t.Logf("%s: %.2f s to the first byte of %s", volume, read-start, file)

	k.RemovePodManifest(t, name)
	if err := poll(2*time.Minute, func() error {
		if pods := crictl(t, ctd, "pods", "-q", "--state", "ready"); pods != "" {
			return fmt.Errorf("the kubelet left pods %q running after the manifest went", pods)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return read - start
}

// poll calls cond, backing off up to half a second between calls, until it
// returns nil, a permanent error, or within has passed.
func poll(within time.Duration, cond func() error) error {
	b := &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, Multiplier: 2, MaxInterval: 500 * time.Millisecond}
	_, err := backoff.Retry(context.Background(), func() (struct{}, error) { return struct{}{}, cond() },
		backoff.WithBackOff(b), backoff.WithMaxElapsedTime(within))
	return err
}
