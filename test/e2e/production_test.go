package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// The snapshotter in production.

// TestSnapshotterSurvivesRestarts: weightsnapd is killed
// (SIGKILL) while a container reads its weights, and started again; then
// containerd restarts. The container keeps reading its weights, new
// containers start, and the daemon holds the artifact's lease again for the
// running container (from its snapshots' labels and parents), as weightsnap
// inspect and rm show.
func TestSnapshotterSurvivesRestarts(t *testing.T) {
	n := startSnapNode(t)
	w := n.pushWeightImage(t, "restart", "16MiB", 2, "/models/x")
	// The reader counts its reads in a file of its own (nerdctl's log driver does not outlive a
	// containerd restart).
	if _, err := n.ctd.Nerdctl("--snapshotter", "weightsnap", "run", "-d", "--name", "reader", "--net", "none",
		"--security-opt", "seccomp=unconfined", w.ref, "sh", "-c",
		"while :; do cat /models/x/* >/dev/null && echo read >>/tmp/reads; sleep 0.1; done"); err != nil {
		t.Fatal(err)
	}
	reads := func() int {
		out, _ := n.ctd.Nerdctl("exec", "reader", "sh", "-c", "cat /tmp/reads")
		return strings.Count(out, "read\n")
	}
	waitReads := func(more int) {
		t.Helper()
		want := reads() + more
		if err := testenv.Wait(30*time.Second, func() error {
			if n := reads(); n < want {
				return fmt.Errorf("%d reads of %d", n, want)
			}
			return nil
		}); err != nil {
			t.Fatalf("the container stopped reading its weights: %v", err)
		}
	}
	waitReads(3)

	n.ws.Kill(t) // kill -9, then start again
	n.waitMetric(t, "weightsnap_snapshotter_leases_held", 1, 10*time.Second)
	if text, err := n.ws.Metrics(); err != nil || !strings.Contains(text, `weightsnap_build_info{goversion="go`) {
		t.Fatalf("weightsnapd's metrics lack weightsnap_build_info: %v\n%s", err, text)
	}
	waitReads(3)
	n.ctd.Restart(t)
	waitReads(3)

	// The running container reads the right bytes; a new one starts and does too.
	out, err := n.ctd.Nerdctl("exec", "reader", "sh", "-c", "cd /models/x && sha256sum *")
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, out, w.pushedArtifact)
	if out, err = n.run(w.ref, "sh", "-c", "cd /models/x && sha256sum *"); err != nil {
		t.Fatal(err)
	}
	checkSums(t, out, w.pushedArtifact)

	// The lease is still shown, and held.
	if info := wsWith(t, n.ws.Config, "inspect", w.id); info.code != 0 || !strings.Contains(info.out, "weightsnapd: lease held true") ||
		!strings.Contains(info.out, "snapshot ") {
		t.Fatalf("weightsnap inspect: exit %d\n%s%s", info.code, info.out, info.errOut)
	}
	if r := wsWith(t, n.ws.Config, "rm", w.id); r.code != 5 || !strings.Contains(r.errOut, "snapshot(s) in use") {
		t.Fatalf("weightsnap rm of the leased artifact: exit %d, want 5 naming the snapshots in use\n%s%s", r.code, r.out, r.errOut)
	}
	t.Logf("weightsnap rm: %s", strings.TrimSpace(wsWith(t, n.ws.Config, "rm", w.id).errOut))
}

// TestSnapshotterModes: an artifact that cannot be had fails
// nerdctl run in required mode, naming the artifact and the reason. An image
// built with --mode preferred starts with the empty pointer, the fallback
// shows in the metrics, and once the artifact is pushed the repair fills the
// weights in for the next container. [snapshotter] mode = "preferred" does
// the same for images that do not say.
func TestSnapshotterModes(t *testing.T) {
	n := startSnapNode(t)
	a := n.pushArtifact(t, "late", "8MiB", 1)
	required := n.buildImage(t, "late-required", "/models/x", a)
	preferred := n.buildImageOver(t, n.base, "late-preferred", "preferred", "/models/x", a)
	deleteManifest(t, a.ref)

	_, err := n.run(required, "true")
	if err == nil || !strings.Contains(err.Error(), "weights "+a.ref[:strings.LastIndex(a.ref, ":")]+"@sha256:") ||
		!strings.Contains(err.Error(), "not found") {
		t.Fatalf("required mode with the artifact gone: %v", err)
	}
	t.Logf("required: %s", lastLine(err.Error()))

	out, err := n.run(preferred, "ls", "-a", "/models/x", "/models/x/.weightsnap/pointers")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, ".safetensors") || !strings.Contains(out, a.hex+".json") || !strings.Contains(out, "WEIGHTS_NOT_MOUNTED") {
		t.Fatalf("the fallback container does not see the empty pointer and its notice:\n%s", out)
	}
	if n.metric(t, "weightsnap_snapshotter_fallbacks_total") != 1 || n.metric(t, "weightsnap_snapshotter_pending_repairs") != 1 {
		t.Fatalf("metrics:\n%s", must(n.ws.Metrics()))
	}
	n.waitMetric(t, `weightsnap_snapshotter_repairs_total{outcome="unresolved"}`, 2, 30*time.Second)

	wsOK(t, a.root, "push", "--plain-http", a.id, a.ref) // the artifact arrives
	n.waitMetric(t, `weightsnap_snapshotter_repairs_total{outcome="filled"}`, 1, 30*time.Second)
	for _, img := range []string{preferred, required} {
		out, err := n.run(img, "sh", "-c", "cd /models/x && sha256sum *")
		if err != nil {
			t.Fatal(err)
		}
		checkSums(t, out, a)
		if strings.Contains(out, "WEIGHTS_NOT_MOUNTED") {
			t.Fatalf("%s: the repaired snapshot still has the notice:\n%s", img, out)
		}
	}
	for _, msg := range []string{"repair: the artifact does not resolve yet", "repair: weights filled in"} {
		if logLine(t, n.ws.Proc.Log, msg, a.id) < 0 {
			t.Fatalf("no %q in the log:\n%s", msg, harness.Tail(n.ws.Proc.Log, 20))
		}
	}

	// The node's mode: preferred for an image that does not say.
	b := n.pushArtifact(t, "late-b", "4MiB", 1)
	img := n.buildImage(t, "late-b", "/models/y", b)
	deleteManifest(t, b.ref)
	n.ws.SetMode(t, "preferred")
	n.ws.Restart(t)
	if out, err := n.run(img, "ls", "/models/y"); err != nil || strings.Contains(out, ".safetensors") {
		t.Fatalf("preferred node: %v\n%s", err, out)
	}
	if n.metric(t, "weightsnap_snapshotter_fallbacks_total") != 1 {
		t.Fatalf("metrics:\n%s", must(n.ws.Metrics()))
	}
}

// deleteManifest deletes a tagged manifest from its registry (and so its
// tags): whoever pulls it now gets "not found".
func deleteManifest(t *testing.T, ref string) {
	t.Helper()
	orasRun(t, "", "manifest", "delete", "--plain-http", "--force", ref)
}

// checkSums fails unless sha256sum's output lists every file of a with its
// source digest.
func checkSums(t *testing.T, out string, a *pushedArtifact) {
	t.Helper()
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			seen[f[1]] = f[0]
		}
	}
	for p, sum := range a.files {
		if seen[p] != sum {
			t.Fatalf("%s: read sha256 %q, the source is %s\n%s", p, seen[p], sum, out)
		}
	}
}

// TestHostMount: weightsnap mount asks weightsnapd to resolve
// an artifact (from the registry: the daemon's store lacks it) and mount it
// read-only on a host directory; a container given that directory with
// nerdctl run -v reads every file with its source digest. weightsnap rm of
// the artifact refuses while it is mounted, also after the daemon was
// killed and started again; after weightsnap umount it succeeds.
func TestHostMount(t *testing.T) {
	n := startSnapNode(t)
	a := n.pushArtifact(t, "hostmount", "16MiB", 2)
	dir := filepath.Join(harness.TempDir(t), "models", "m")
	if r := wsWith(t, n.ws.Config, "mount", "--plain-http", a.ref, dir); r.code != 0 {
		t.Fatalf("weightsnap mount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	out, err := n.ctd.Nerdctl("run", "--rm", "--net", "none", "--security-opt", "seccomp=unconfined",
		"-v", dir+":/models:ro", n.base, "sh", "-c", "cd /models && sha256sum *")
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, out, a)

	rmRefused := func() {
		t.Helper()
		r := wsWith(t, n.ws.Config, "rm", a.id)
		if r.code != 5 || !strings.Contains(r.errOut, "mounted at "+dir) {
			t.Fatalf("weightsnap rm of a mounted artifact: exit %d, want 5 naming the mount\n%s%s", r.code, r.out, r.errOut)
		}
	}
	rmRefused()
	if info := wsWith(t, n.ws.Config, "inspect", a.id); !strings.Contains(info.out, "mount     "+dir) {
		t.Fatalf("weightsnap inspect does not list the mount:\n%s%s", info.out, info.errOut)
	}
	n.ws.Kill(t) // the mount outlives the daemon, and keeps its lease
	rmRefused()
	if list := wsWith(t, n.ws.Config, "mount"); !strings.Contains(list.out, dir) || !strings.Contains(list.out, "true") {
		t.Fatalf("weightsnap mount (list) after a restart:\n%s%s", list.out, list.errOut)
	}

	if r := wsWith(t, n.ws.Config, "umount", dir); r.code != 0 {
		t.Fatalf("weightsnap umount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if r := wsWith(t, n.ws.Config, "rm", a.id); r.code != 0 {
		t.Fatalf("weightsnap rm after umount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if r := wsWith(t, n.ws.Config, "umount", dir); r.code != 3 {
		t.Fatalf("weightsnap umount of what is no mount: exit %d, want 3\n%s", r.code, r.errOut)
	}
}
