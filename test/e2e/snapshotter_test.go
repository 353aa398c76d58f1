package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestSnapshotterRunsWeightImage: nerdctl runs a
// weight image of two artifacts through weightsnap; the container sees
// every weight file with its source digest, containerd's content store
// holds none of the weight bytes, and each file of the committed weight
// snapshots on the host is the store file's inode. The second artifact
// resolves ahead, while the first is prepared. The image alone holds no
// lease; a running container's leases hold the artifacts (rm refuses),
// survive a daemon restart, and go with the container.
func TestSnapshotterRunsWeightImage(t *testing.T) {
	n := startSnapNode(t)
	x := n.pushArtifact(t, "x", "24MiB", 2)
	y := n.pushArtifact(t, "y", "4MiB", 1)
	img := n.buildImage(t, "xy", "/models/x", x, "/models/y", y)

	// Cold: the snapshotter fetches the artifacts from the registry their pointers name.
	out, err := n.run(img, "sh", "-c", "cd /models && sha256sum x/* y/*")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			seen[f[1]] = f[0]
		}
	}
	if strings.Contains(out, "WEIGHTS_NOT_MOUNTED") { // the pointer layer's notice is not where the weights are
		t.Fatalf("a container with its weights sees WEIGHTS_NOT_MOUNTED:\n%s", out)
	}
	for dir, a := range map[string]*pushedArtifact{"x": x, "y": y} {
		for p, sum := range a.files {
			if seen[dir+"/"+p] != sum {
				t.Fatalf("%s/%s: the container read sha256 %q, the source is %s\n%s", dir, p, seen[dir+"/"+p], sum, out)
			}
		}
	}
	if n.metric(t, `weightsnap_snapshotter_resolve_seconds_count{outcome="fetched"}`) != 2 {
		t.Fatalf("metrics:\n%s", must(n.ws.Metrics()))
	}
	ahead := logLine(t, n.ws.Proc.Log, "resolving a later weight layer ahead", y.id)
	firstDone := logLine(t, n.ws.Proc.Log, "prepare weight layer", x.id)
	if ahead < 0 || firstDone < 0 || ahead > firstDone {
		t.Fatalf("the second artifact did not start resolving before the first layer was prepared (lines %d, %d):\n%s",
			ahead, firstDone, harness.Tail(n.ws.Proc.Log, 30))
	}

	// containerd's content store holds none of the weight bytes.
	blobs := filepath.Join(n.ctd.Root, "io.containerd.content.v1.content", "blobs", "sha256")
	weights := map[string]bool{}
	for _, a := range []*pushedArtifact{x, y} {
		for _, sum := range a.files {
			weights[sum] = true
		}
	}
	var stored int64
	ents, _ := os.ReadDir(blobs)
	for _, e := range ents {
		if weights[e.Name()] {
			t.Fatalf("content store holds weight blob %s", e.Name())
		}
		if fi, err := e.Info(); err == nil {
			stored += fi.Size()
		}
	}
	if stored >= (x.bytes+y.bytes)/2 {
		t.Fatalf("content store holds %d bytes for %d bytes of weights", stored, x.bytes+y.bytes)
	}

	// On the host, the committed weight snapshots' files are the store's inodes.
	for target, a := range map[string]*pushedArtifact{"/models/x": x, "/models/y": y} {
		dir := n.weightSnapshotDir(t, a, target)
		for p := range a.files {
			sameInode(t, filepath.Join(dir, p), filepath.Join(n.ws.Root, "artifacts", a.hex, p))
		}
	}
	t.Logf("content store %d bytes, weights %d bytes", stored, x.bytes+y.bytes)

	// The image alone holds no lease (the cold run's container is gone).
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 0, 10*time.Second)
	// While a container uses the artifacts the daemon holds them: rm refuses, also after a restart.
	if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "run", "-d", "--name", "user", "--net", "none",
		"--security-opt", "seccomp=unconfined", img, "sleep", "600"); err != nil {
		t.Fatal(err)
	}
	rmRefused := func() {
		t.Helper()
		if r := ws(t, n.ws.Root, "rm", x.id); r.code != 5 {
			t.Fatalf("weightsnap rm of a leased artifact: exit %d, want 5 (busy)\n%s%s", r.code, r.out, r.errOut)
		}
	}
	rmRefused()
	old := n.ws.Proc
	n.ws.Restart(t)
	if err := old.Err(); err != nil {
		t.Fatalf("weightsnapd did not stop cleanly on SIGTERM: %v", err)
	}
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 2, 10*time.Second)
	rmRefused()
	// A second run is served from the snapshots.
	if _, err := n.run(img, "ls", "/models/x", "/models/y"); err != nil {
		t.Fatal(err)
	}

	// The last container's snapshot takes the leases with it; the image stays.
	if _, err := n.ctd.Nerdctl("rm", "-f", "user"); err != nil {
		t.Fatal(err)
	}
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 0, 60*time.Second)
	// Removing the image removes its snapshots (containerd's GC); no lease comes back.
	if _, err := n.ctd.Nerdctl("rmi", img); err != nil {
		t.Fatal(err)
	}
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 0, 60*time.Second)
	wsOK(t, n.ws.Root, "rm", x.id)
}

func must(s string, err error) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// TestSnapshotterSharedPageCache: two containers of
// one weight image read all the weights at once; the page cache grows by
// the weights once, not twice: the pages are the store's, and the cgroups
// of the two containers are charged for them once between them.
func TestSnapshotterSharedPageCache(t *testing.T) {
	n := startSnapNode(t)
	w := n.pushWeightImage(t, "shared", "256MiB", 4, "/models/x")
	if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "pull", w.ref); err != nil {
		t.Fatal(err)
	}
	// A first container of the image leases the artifact, so the readers' Prepares find it held: the
	// store lookup that takes a lease reads the files' tensor tables, into pages charged to
	// weightsnapd's cgroup, not the readers'.
	if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "run", "-d", "--name", "holder", "--net", "none",
		w.ref, "sleep", "600"); err != nil {
		t.Fatal(err)
	}
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 1, 30*time.Second)
	// No page of the weights in the cache: only these files, not the machine's cache.
	evict(t, filepath.Join(n.ws.Root, "artifacts", w.hex))
	before := meminfoCached(t)
	names := []string{"reader-a", "reader-b"}
	for _, name := range names {
		if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "run", "-d", "--name", name, "--net", "none",
			"--security-opt", "seccomp=unconfined", w.ref, "sh", "-c", "cat /models/x/* >/dev/null && echo read-all && sleep 600"); err != nil {
			t.Fatal(err)
		}
	}
	var charged int64
	for _, name := range names {
		if err := testenv.Wait(2*time.Minute, func() error {
			if logs, _ := n.ctd.Nerdctl("logs", name); !strings.Contains(logs, "read-all") {
				return fmt.Errorf("its log: %q", logs)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s did not read its weights: %v", name, err)
		}
		out, err := n.ctd.Nerdctl("inspect", "--format", "{{.State.Pid}}", name)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatal(err)
		}
		c := cgroupFileBytes(t, pid)
		t.Logf("%s: %d MiB of page cache charged to its cgroup", name, c>>20)
		charged += c
	}
	grew := meminfoCached(t) - before
	t.Logf("weights %d MiB; both containers' cgroups %d MiB; /proc/meminfo Cached grew %d MiB (machine-wide, noisy)",
		w.bytes>>20, charged>>20, grew>>20)
	if charged < w.bytes*9/10 || charged > w.bytes*3/2 {
		t.Fatalf("two containers were charged %d bytes of page cache for %d bytes of weights: want them once", charged, w.bytes)
	}
}

// TestSnapshotterBadLabels: weight images whose
// pointer labels are malformed fail Prepare with a clear error naming the
// label, and one whose artifact cannot resolve fails naming the artifact
// and the cause (required mode); nothing is mounted or left; the daemon
// keeps serving.
func TestSnapshotterBadLabels(t *testing.T) {
	n := startSnapNode(t)
	w := n.pushWeightImage(t, "good", "4MiB", 1, "/models/x")
	manifest := craneManifest(t, n, w.ref)
	mountsBefore := mountsUnder(t, n.ws.SnapshotRoot)
	for _, tc := range []struct {
		name, label, value string
		extra              map[string]string
	}{
		{"relative target", "containerd.io/snapshot/weightsnap.target", "models/x", nil},
		{"dot-dot target", "containerd.io/snapshot/weightsnap.target", "/models/../../etc", nil},
		{"tag instead of digest", "containerd.io/snapshot/weightsnap.artifact", n.reg.Ref("models/good:v1"), nil},
		{"identity not sha256", "containerd.io/snapshot/weightsnap.identity", "md5:" + strings.Repeat("a", 32), nil},
		{"oversized", "containerd.io/snapshot/weightsnap.target", "/" + strings.Repeat("x", 2500),
			map[string]string{"containerd.io/snapshot/weightsnap.note": strings.Repeat("y", 1700)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := pushEditedPointer(t, n, w, manifest, strings.ReplaceAll(tc.name, " ", "-"), tc.label, tc.value, tc.extra)
			out, err := n.run(ref, "true")
			if err == nil {
				t.Fatalf("a weight image with a bad %s ran: %s", tc.label, out)
			}
			msg := err.Error()
			if !strings.Contains(msg, "failed to prepare extraction snapshot") ||
				(!strings.Contains(msg, tc.label) && !strings.Contains(msg, "weightsnap labels take")) {
				t.Fatalf("error does not say what was wrong:\n%s", msg)
			}
			t.Logf("nerdctl: %s", lastLine(msg))
		})
	}
	// Well-formed labels whose artifact cannot resolve (required mode): the
	// error names the artifact and the cause.
	t.Run("artifact on a host that is not configured", func(t *testing.T) {
		elsewhere := "127.0.0.2:5000/models/good@sha256:" + strings.Repeat("e", 64)
		ref := pushEditedPointer(t, n, w, manifest, "elsewhere", "containerd.io/snapshot/weightsnap.artifact", elsewhere, nil)
		_, err := n.run(ref, "true")
		if err == nil || !strings.Contains(err.Error(), "weights "+elsewhere) || !strings.Contains(err.Error(), "127.0.0.2:5000 is not a configured registry") {
			t.Fatalf("required-mode failure does not name the artifact and the cause: %v", err)
		}
		// It says what to edit, and its class once.
		if msg := err.Error(); !strings.Contains(msg, "[resolve] registries in "+n.ws.Config) || strings.Count(msg, "permission denied") != 1 {
			t.Fatalf("the failure does not name the key and the file to edit, once: %v", err)
		}
		t.Logf("nerdctl: %s", lastLine(err.Error()))
	})
	if got := mountsUnder(t, n.ws.SnapshotRoot); got != mountsBefore {
		t.Fatalf("%d mounts name the snapshot root, %d before", got, mountsBefore)
	}
	snaps, err := n.ctd.Ctr("snapshots", "--snapshotter", "weightsnap", "ls")
	if err != nil {
		t.Fatal(err)
	}
	// Only busybox's one layer may be there, committed without a parent
	// (containerd's garbage collector may have taken it already: no image
	// holds it); a failed Prepare would leave an active snapshot, a weight
	// layer one with a parent.
	for _, line := range strings.Split(strings.TrimSpace(snaps), "\n")[1:] {
		if f := strings.Fields(line); len(f) != 2 || f[1] != "Committed" {
			t.Fatalf("snapshots left by failed Prepares:\n%s", snaps)
		}
	}
	if n.metric(t, `weightsnap_snapshotter_prepares_total{layer="weight",outcome="invalid"}`) != 5 ||
		n.metric(t, `weightsnap_snapshotter_prepares_total{layer="weight",outcome="failed"}`) != 1 {
		t.Fatalf("metrics:\n%s", must(n.ws.Metrics()))
	}
	// The daemon keeps serving: the good image runs.
	if out, err := n.run(w.ref, "ls", "/models/x"); err != nil || n.ws.Proc.Exited() {
		t.Fatalf("after the bad labels: %v\n%s", err, out)
	}
}

// craneManifest fetches an image manifest as JSON.
func craneManifest(t *testing.T, n *snapNode, ref string) map[string]any {
	t.Helper()
	out, err := harness.Run("", harness.Peers(t).Crane, "manifest", "--insecure", ref)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// pushEditedPointer pushes a copy of a weight image's manifest whose pointer
// layer carries label=value (and extra labels), tagged tag, and returns its
// reference. The layer's blobs are the same; only annotations differ.
func pushEditedPointer(t *testing.T, n *snapNode, w *weightImage, manifest map[string]any, tag, label, value string, extra map[string]string) string {
	t.Helper()
	raw, _ := json.Marshal(manifest)
	var m map[string]any
	json.Unmarshal(raw, &m)
	layers := m["layers"].([]any)
	ann := layers[len(layers)-1].(map[string]any)["annotations"].(map[string]any)
	ann[label] = value
	for k, v := range extra {
		ann[k] = v
	}
	raw, _ = json.Marshal(m)
	file := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimSuffix(w.ref[:strings.LastIndex(w.ref, "@")], ":v1") + ":" + tag
	orasRun(t, "", "manifest", "push", "--plain-http", "--media-type", "application/vnd.oci.image.manifest.v1+json", ref, file)
	return ref
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "weightsnap") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

// logLine is the number of the first JSON log line with msg about the
// artifact id (its log key "id"), or -1.
func logLine(t *testing.T, path, msg, id string) int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(raw), "\n") {
		var e struct {
			Msg string
			ID  string `json:"id"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == msg && e.ID == id {
			return i
		}
	}
	return -1
}

// TestSnapshotterSharedView: two images of one artifact
// at one target, over different bases (two chains), get weight snapshots
// that are links to one shared view of the store's inodes; a container
// reads the weights through the link (overlayfs follows it in lowerdir);
// once both images are gone, containerd's garbage collection (Cleanup)
// removes the view.
func TestSnapshotterSharedView(t *testing.T) {
	n := startSnapNode(t)
	a := n.pushArtifact(t, "shared-view", "8MiB", 2)
	withBase := n.buildImage(t, "sv-base", "/models/x", a)
	alone := n.buildImageOver(t, "scratch", "sv-alone", "", "/models/x", a)
	for _, img := range []string{withBase, alone} {
		if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "pull", img); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]int{}
	dirs, _ := filepath.Glob(filepath.Join(n.ws.SnapshotRoot, "snapshots", "*", "fs"))
	for _, d := range dirs {
		if target, err := os.Readlink(d); err == nil {
			links[target]++
		}
	}
	views := filepath.Join(n.ws.SnapshotRoot, "views", a.hex)
	if len(links) != 1 {
		t.Fatalf("weight snapshots' links %v, want two to one view", links)
	}
	for view, count := range links {
		if count != 2 || !strings.HasPrefix(view, views+"/") {
			t.Fatalf("weight snapshots' links %v, want two to one view under %s", links, views)
		}
		for p := range a.files {
			sameInode(t, filepath.Join(view, "models/x", p), filepath.Join(n.ws.Root, "artifacts", a.hex, p))
		}
	}
	out, err := n.run(withBase, "sh", "-c", "cd /models/x && sha256sum *")
	if err != nil {
		t.Fatal(err)
	}
	for p, sum := range a.files {
		if !strings.Contains(out, sum+"  "+p) {
			t.Fatalf("the container read %q, want %s of %s", out, sum, p)
		}
	}

	for _, img := range []string{withBase, alone} {
		if _, err := n.ctd.Nerdctl("rmi", img); err != nil {
			t.Fatal(err)
		}
	}
	if err := testenv.Wait(time.Minute, func() error {
		if ents, err := os.ReadDir(views); !os.IsNotExist(err) {
			return fmt.Errorf("views of the artifact: %d, %v", len(ents), err)
		}
		return nil
	}); err != nil {
		t.Fatalf("no image needs the artifact, and its view stays: %v", err)
	}
}

// TestSnapshotterRmAfterRunRm: weightsnap rm right after nerdctl run --rm
// returns removes the artifact the container read: rm waits the moment
// containerd takes to remove the container's snapshot, which holds the
// lease.
func TestSnapshotterRmAfterRunRm(t *testing.T) {
	n := startSnapNode(t)
	a := n.pushArtifact(t, "rmafter", "4MiB", 1)
	img := n.buildImage(t, "rmafter", "/models/x", a)
	if _, err := n.run(img, "ls", "/models/x"); err != nil {
		t.Fatal(err)
	}
	if r := wsWith(t, n.ws.Config, "rm", a.id); r.code != 0 {
		t.Fatalf("weightsnap rm right after nerdctl run --rm: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
}
