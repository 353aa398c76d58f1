package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// TestHostMountInUse (#27 item 1): a container given a host mount with
// nerdctl run -v keeps it while it uses it. With a weight file open, it
// makes weightsnap umount exit 5 naming its process (pid, command,
// container id), and it still reads its file; an idle container that has
// the directory mounted is named too (the unmount would empty its
// directory). Once the containers are gone, the unmount succeeds.
func TestHostMountInUse(t *testing.T) {
	n := startSnapNode(t)
	a := n.pushArtifact(t, "inuse", "16MiB", 2)
	dir := filepath.Join(harness.TempDir(t), "models", "m")
	if r := wsWith(t, n.ws.Config, "mount", "--plain-http", a.ref, dir); r.code != 0 {
		t.Fatalf("weightsnap mount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	var weight string
	for p := range a.files {
		if strings.HasSuffix(p, ".safetensors") && (weight == "" || p < weight) {
			weight = p
		}
	}
	if weight == "" {
		t.Fatalf("no weight file in %v", a.files)
	}

	// start runs a container given the mount and returns its id and the
	// pid of its process, once that process is sleep.
	start := func(name, script string) (id string, pid int) {
		t.Helper()
		out, err := n.ctd.Nerdctl("run", "-d", "--name", name, "--net", "none", "--security-opt", "seccomp=unconfined",
			"-v", dir+":/models:ro", n.base, "sh", "-c", script)
		if err != nil {
			t.Fatal(err)
		}
		id = strings.TrimSpace(out)
		t.Cleanup(func() { n.ctd.Nerdctl("rm", "-f", name) })
		out, err = n.ctd.Nerdctl("inspect", "--format", "{{.State.Pid}}", name)
		if pid, _ = strconv.Atoi(strings.TrimSpace(out)); err != nil || pid == 0 {
			t.Fatalf("the pid of %s: %q %v", name, out, err)
		}
		testenv.Eventually(t, 30*time.Second, func() bool {
			comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
			return string(comm) == "sleep\n"
		}, "%s never came to sleep", name)
		return id, pid
	}
	refused := func(what, id string, pid int) {
		t.Helper()
		r := wsWith(t, n.ws.Config, "umount", dir)
		want := "pid " + strconv.Itoa(pid) + " (sleep) in container " + id[:12]
		if r.code != 5 || !strings.Contains(r.errOut, want) {
			t.Fatalf("weightsnap umount under %s: exit %d, want 5 naming %q\n%s%s", what, r.code, want, r.out, r.errOut)
		}
		t.Logf("weightsnap umount under %s: %s", what, strings.TrimSpace(r.errOut))
		if list := wsWith(t, n.ws.Config, "mount"); !strings.Contains(list.out, dir) {
			t.Fatalf("the refused unmount lost the mount:\n%s%s", list.out, list.errOut)
		}
	}

	id, pid := start("holder", "exec 3</models/"+weight+" && exec sleep 300")
	refused("a container with a file open", id, pid)
	out, err := n.ctd.Nerdctl("exec", "holder", "sh", "-c", "sha256sum </proc/1/fd/3; sha256sum /models/"+weight)
	if err != nil {
		t.Fatal(err)
	}
	if sums := strings.Fields(out); len(sums) != 4 || sums[0] != a.files[weight] || sums[2] != a.files[weight] {
		t.Fatalf("the container reads %q after the refused unmount, want sha256 %s", out, a.files[weight])
	}
	if _, err := n.ctd.Nerdctl("rm", "-f", "holder"); err != nil {
		t.Fatal(err)
	}

	id, pid = start("idle", "exec sleep 300")
	refused("an idle container", id, pid)
	if _, err := n.ctd.Nerdctl("rm", "-f", "idle"); err != nil {
		t.Fatal(err)
	}

	if r := wsWith(t, n.ws.Config, "umount", dir); r.code != 0 {
		t.Fatalf("weightsnap umount once the containers are gone: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if r := wsWith(t, n.ws.Config, "rm", a.id); r.code != 0 {
		t.Fatalf("weightsnap rm after umount: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if raw, _ := os.ReadFile("/proc/self/mountinfo"); slices.Contains(strings.Fields(string(raw)), dir) {
		t.Fatalf("%s is still mounted", dir)
	}
}
