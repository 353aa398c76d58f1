package e2e

import (
	"fmt"
	"testing"

	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// TestNerdctlModelSwitching (containerd's default
// namespace): on a store on a small tmpfs, more weight images than fit run
// in turn with nerdctl while a container of the first keeps running. Every
// run reads exact weights; the running container's artifact is never
// evicted; what the filesystem uses stays what the stored artifacts need
// (an evicted artifact's weight snapshots are emptied, their links gone);
// and a container of an image whose artifact was evicted, started again at
// the end, gets its weights again.
func TestNerdctlModelSwitching(t *testing.T) {
	const tmpfs = 144 << 20
	n := startSnapNodeOpts(t, "weightsnap.toml", harness.WeightsnapdOptions{StoreTmpfs: fmt.Sprint(tmpfs>>20, "m")}) // the watermark off: only the builds evict here
	var imgs []*weightImage
	for i := range 5 {
		imgs = append(imgs, n.pushWeightImage(t, fmt.Sprint("switch", i), "32MiB", 2, "/models/m", "--seed", fmt.Sprint(3200+i)))
	}
	read := func(img *weightImage) {
		t.Helper()
		out, err := n.run(img.ref, "sh", "-c", "cd /models/m && sha256sum *")
		if err != nil {
			t.Fatalf("nerdctl run of %s: %v\n%s", img.ref, err, harness.Tail(n.ws.Proc.Log, 30))
		}
		checkSums(t, out, img.pushedArtifact)
	}
	if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "run", "-d", "--name", "keeper", "--net", "none",
		"--security-opt", "seccomp=unconfined", imgs[0].ref, "sleep", "600"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.ctd.Nerdctl("rm", "-f", "keeper") })
	checkUse := func(when string) map[string]int64 {
		t.Helper()
		stored := storedIDs(t, n.ws)
		if stored[imgs[0].hex] == 0 {
			t.Fatalf("%s: the running container's artifact was evicted (store: %v)", when, stored)
		}
		var sum int64
		for _, b := range stored {
			sum += b
		}
		var st unix.Statfs_t
		if err := unix.Statfs(n.ws.Root, &st); err != nil {
			t.Fatal(err)
		}
		// The stored artifacts, busybox's layer and the snapshots' metadata.
		if used := int64(st.Blocks-st.Bfree) * st.Bsize; used > sum+12<<20 {
			du, _ := harness.Run(n.ws.Root, "du", "-ab", "--max-depth=3", ".")
			t.Fatalf("%s: df: %d bytes used, the store holds %d: links of evicted artifacts survive\n%s", when, used, sum, du)
		}
		return stored
	}
	for i, img := range imgs[1:] {
		read(img)
		checkUse(fmt.Sprint("after image ", i+1))
	}
	stored := checkUse("after the last image")
	if len(stored) >= len(imgs) {
		t.Fatalf("nothing was evicted: the store holds all %d artifacts", len(stored))
	}
	if evicted := n.metric(t, `weightsnap_store_evictions_total{reason="capacity"}`); evicted < 1 {
		t.Fatalf("no eviction counted:\n%s", must(n.ws.Metrics()))
	}
	if stored[imgs[1].hex] != 0 {
		t.Fatalf("the first image run in turn is still stored: %v", stored)
	}
	// Its image stays; its next container resolves the artifact again.
	read(imgs[1])
	checkUse("after the first image again")
	if out, err := n.ctd.Nerdctl("exec", "keeper", "sh", "-c", "cd /models/m && sha256sum *"); err != nil {
		t.Fatal(err)
	} else {
		checkSums(t, out, imgs[0].pushedArtifact)
	}
	if logLine(t, n.ws.Proc.Log, "emptied weight snapshot filled in again", imgs[1].id) < 0 {
		t.Fatalf("no refill logged:\n%s", harness.Tail(n.ws.Proc.Log, 40))
	}
}
