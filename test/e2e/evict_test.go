package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// TestStoreEvictsForNewModels: on a 1 GiB store
// (a tmpfs) holding three 300 MiB models, one pinned and one host-mounted
// through weightsnapd, importing a fourth and a fifth succeeds, each
// evicting the least recently used unpinned, unleased artifact; the pinned
// and the mounted ones survive and df shows the bytes back; a model that
// cannot fit beside the pinned and leased ones fails at once, naming them,
// and evicts nothing.
func TestStoreEvictsForNewModels(t *testing.T) {
	// The harness leaves the daemon's watermark off: only the imports evict.
	ws := harness.StartWeightsnapd(t, harness.WeightsnapdOptions{StoreTmpfs: "1g"})
	base := t.TempDir()
	model := func(i int, size string) string {
		dir := filepath.Join(base, fmt.Sprint("m", i))
		if r := wsWith(t, ws.Config, "dev", "synth", "--out", dir, "--size", size, "--shards", "2", "--seed", fmt.Sprint(320+i)); r.code != 0 {
			t.Fatalf("synth: exit %d\n%s", r.code, r.errOut)
		}
		return dir
	}
	importModel := func(i int, size string) wsResult {
		return wsWith(t, ws.Config, "import", model(i, size), "--revision", storetest.Revision, "--repository", fmt.Sprint("org/m", i))
	}
	var ids []string
	for i := range 5 {
		r := importModel(i, "300MiB")
		if r.code != 0 {
			t.Fatalf("import of model %d: exit %d\n%s%s", i, r.code, r.out, r.errOut)
		}
		ids = append(ids, strings.TrimPrefix(strings.TrimSpace(r.out), "sha256:"))
		switch i {
		case 0:
			if r := wsWith(t, ws.Config, "pin", ids[0], "--reason", "the golden model"); r.code != 0 {
				t.Fatalf("pin: exit %d\n%s", r.code, r.errOut)
			}
		case 1:
			dir := filepath.Join(harness.TempDir(t), "mnt")
			if r := wsWith(t, ws.Config, "mount", ids[1], dir); r.code != 0 {
				t.Fatalf("mount: exit %d\n%s", r.code, r.errOut)
			}
			t.Cleanup(func() { wsWith(t, ws.Config, "umount", dir) })
		}
	}
	// The fourth evicted the third (the least recently used free one), the
	// fifth the fourth.
	stored := storedIDs(t, ws)
	for i, want := range []bool{true, true, false, false, true} {
		if (stored[ids[i]] > 0) != want {
			t.Errorf("model %d stored %v, want %v (store: %v)", i, stored[ids[i]], want, stored)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(ws.Root, &st); err != nil {
		t.Fatal(err)
	}
	used, three := int64(st.Blocks-st.Bfree)*st.Bsize, 3*stored[ids[4]]+8<<20
	if used > three || used >= 1<<30 {
		du, _ := harness.Run(ws.Root, "du", "-ab", "--max-depth=2", ".")
		t.Fatalf("df: %d bytes used on the store's filesystem, want three models' (%d at most)\n%s", used, three, du)
	}
	// 500 MiB cannot fit beside the pinned and the mounted ones (600 MiB of 1 GiB).
	r := importModel(5, "500MiB")
	msg := r.errOut
	if r.code != 5 || !strings.Contains(msg, "eviction could free") || !strings.Contains(msg, ids[0][:12]) || !strings.Contains(msg, "pinned by cli") ||
		!strings.Contains(msg, "the golden model") || !strings.Contains(msg, ids[1][:12]) || !strings.Contains(msg, "leased by") {
		t.Fatalf("import of a model that cannot fit: exit %d, want 5 naming the pinned %s and the leased %s\n%s%s", r.code, ids[0][:12], ids[1][:12], r.out, msg)
	}
	if storedIDs(t, ws)[ids[4]] == 0 {
		t.Fatal("the refused import evicted the fifth model")
	}
	t.Logf("refused: %s", strings.TrimSpace(msg))
}

// startLogged fails unless the daemon's start log names the configuration
// in force with the fields want, and the sha256 of its configuration and
// domain policy files.
func startLogged(t *testing.T, ws *harness.Weightsnapd, want map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(ws.Proc.Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || !strings.HasPrefix(fmt.Sprint(e["msg"]), "configuration in force") {
			continue
		}
		for k, v := range want {
			if e[k] != v {
				t.Errorf("start log: %s = %v, want %v", k, e[k], v)
			}
		}
		for _, k := range []string{"config_digest", "domain_policy_digest"} {
			if !strings.HasPrefix(fmt.Sprint(e[k]), "sha256:") {
				t.Errorf("start log: %s = %v, want a sha256 digest", k, e[k])
			}
		}
		return
	}
	t.Fatalf("no start log of the configuration in force:\n%s", harness.Tail(ws.Proc.Log, 30))
}

// storedIDs is the identity hexes the daemon's store holds, with their bytes.
func storedIDs(t *testing.T, ws *harness.Weightsnapd) map[string]int64 {
	t.Helper()
	r := wsWith(t, ws.Config, "ls", "--json")
	var list []struct {
		ID    string `json:"id"`
		Bytes int64  `json:"total_bytes"`
	}
	if err := json.Unmarshal([]byte(r.out), &list); r.code != 0 || err != nil {
		t.Fatalf("ls: exit %d, %v\n%s", r.code, err, r.errOut)
	}
	out := map[string]int64{}
	for _, a := range list {
		out[a.ID] = a.Bytes
	}
	return out
}

// TestDaemonAnswersForEviction: on a node where weightsnapd runs and
// images link their artifacts through weight snapshots, ls --use shows
// what the daemon's eviction frees (a model's whole size, its weight
// snapshots emptied first; the store alone would free only what nothing
// links), gc --evict --dry-run --to lists what the daemon would evict and
// evicts nothing, gc --evict --to has it evict and df shows the bytes
// back, and a target that a running container's lease keeps out of reach
// exits 5 naming it.
func TestDaemonAnswersForEviction(t *testing.T) {
	n := startSnapNodeOpts(t, "weightsnap.toml", harness.WeightsnapdOptions{StoreTmpfs: "256m"}) // the watermark off: only gc evicts here
	startLogged(t, n.ws, map[string]any{"config": n.ws.Config, "high_watermark_percent": 0.0, "eviction": "lru"})
	var imgs []*weightImage
	for i := range 3 {
		img := n.pushWeightImage(t, fmt.Sprint("authority", i), "32MiB", 2, "/models/m", "--seed", fmt.Sprint(4900+i))
		if out, err := n.run(img.ref, "sh", "-c", "cat /models/m/* >/dev/null"); err != nil {
			t.Fatalf("nerdctl run of %s: %v\n%s", img.ref, err, out)
		}
		imgs = append(imgs, img)
	}
	if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "run", "-d", "--name", "keeper", "--net", "none",
		"--security-opt", "seccomp=unconfined", imgs[0].ref, "sleep", "600"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.ctd.Nerdctl("rm", "-f", "keeper") })
	// containerd removes a --rm container's snapshot in its next garbage
	// collection, after nerdctl returned: until then its artifact is leased.
	for _, img := range imgs[1:] {
		testenv.Eventually(t, 30*time.Second, func() bool {
			r := wsWith(t, n.ws.Config, "inspect", "--json", img.hex)
			var j struct {
				Leases string `json:"leases"`
			}
			return r.code == 0 && json.Unmarshal([]byte(r.out), &j) == nil && j.Leases == "none"
		}, "the lease of %s once its container is gone", img.hex[:12])
	}

	type use struct {
		ID  string `json:"id"`
		Use struct {
			Bytes int64 `json:"bytes"`
			Frees int64 `json:"frees_bytes"`
		} `json:"use"`
	}
	lsUse := func(args ...string) (map[string]use, string) {
		t.Helper()
		r := wsWith(t, n.ws.Config, append(args, "ls", "--use", "--json")...)
		var list []use
		if err := json.Unmarshal([]byte(r.out), &list); r.code != 0 || err != nil {
			t.Fatalf("ls --use: exit %d, %v\n%s", r.code, err, r.errOut)
		}
		out := map[string]use{}
		for _, u := range list {
			out[u.ID] = u
		}
		return out, r.errOut
	}
	daemon, stderr := lsUse()
	if strings.Contains(stderr, "store alone") {
		t.Errorf("ls --use with weightsnapd running: %s", stderr)
	}
	var sum int64
	for _, img := range imgs {
		u := daemon[img.hex]
		if u.Use.Bytes < 32<<20 || u.Use.Frees != u.Use.Bytes {
			t.Fatalf("ls --use of %s, which an image links: %+v, want it to free its whole size", img.hex[:12], u)
		}
		sum += u.Use.Bytes
	}
	alone, stderr := lsUse("--control-address", filepath.Join(t.TempDir(), "absent.sock"))
	if u := alone[imgs[1].hex]; u.Use.Frees >= u.Use.Bytes || !strings.Contains(stderr, "speaks for the store alone") {
		t.Errorf("ls --use of the store alone: %+v, stderr %q; want the weight snapshots' links to keep the bytes, and a note", u, stderr)
	}

	// imgs[1] is the least recently used one nothing leases: half its size
	// to free takes it alone.
	target := fmt.Sprint(sum - daemon[imgs[1].hex].Use.Bytes/2)
	r := wsWith(t, n.ws.Config, "gc", "--evict", "--dry-run", "--to", target, "--json")
	var plan struct {
		Evicted []struct {
			ID string `json:"id"`
		} `json:"evicted"`
		DryRun bool   `json:"dry_run"`
		Daemon string `json:"daemon"`
	}
	if err := json.Unmarshal([]byte(r.out), &plan); r.code != 0 || err != nil || !plan.DryRun || plan.Daemon != "answered" ||
		len(plan.Evicted) != 1 || plan.Evicted[0].ID != imgs[1].id {
		t.Fatalf("gc --evict --dry-run --to %s: exit %d, %v, %+v\n%s%s", target, r.code, err, plan, r.out, r.errOut)
	}
	if storedIDs(t, n.ws)[imgs[1].hex] == 0 {
		t.Fatal("a dry run evicted")
	}

	var before, after unix.Statfs_t
	if err := unix.Statfs(n.ws.Root, &before); err != nil {
		t.Fatal(err)
	}
	r = wsWith(t, n.ws.Config, "gc", "--evict", "--to", target)
	if r.code != 0 || !strings.Contains(r.out, "evicted "+imgs[1].hex) || strings.Contains(r.errOut, "store alone") {
		t.Fatalf("gc --evict --to %s: exit %d\n%s%s", target, r.code, r.out, r.errOut)
	}
	if err := unix.Statfs(n.ws.Root, &after); err != nil {
		t.Fatal(err)
	}
	if freed := int64(after.Bfree-before.Bfree) * after.Bsize; freed < daemon[imgs[1].hex].Use.Bytes*9/10 {
		du, _ := harness.Run(n.ws.Root, "du", "-ab", "--max-depth=3", ".")
		t.Fatalf("df: %d bytes freed by evicting %s (%d bytes)\n%s", freed, imgs[1].hex[:12], daemon[imgs[1].hex].Use.Bytes, du)
	}
	if stored := storedIDs(t, n.ws); stored[imgs[1].hex] != 0 || stored[imgs[0].hex] == 0 {
		t.Fatalf("after gc --evict: %v", stored)
	}

	// The running container leases imgs[0]: 0 bytes cannot be met.
	r = wsWith(t, n.ws.Config, "gc", "--evict", "--to", "0")
	if r.code != 5 || !strings.Contains(r.errOut, imgs[0].hex[:12]) || !strings.Contains(r.errOut, "leased") {
		t.Fatalf("gc --evict --to 0 beside a running container: exit %d, want 5 naming %s leased\n%s%s", r.code, imgs[0].hex[:12], r.out, r.errOut)
	}
}
