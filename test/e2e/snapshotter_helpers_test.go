package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// Helpers of the snapshotter's end-to-end tests (snapshotter_test.go).

// snapNode is one node: a registry, weightsnapd, and containerd configured
// with the contrib snippet (the proxy plugin).
type snapNode struct {
	reg  *harness.Registry
	ws   *harness.Weightsnapd
	ctd  *harness.Containerd
	base string // busybox in the registry
}

func startSnapNode(t *testing.T) *snapNode {
	t.Helper()
	return startSnapNodeWith(t, "weightsnap.toml")
}

// startSnapNodeWith is startSnapNode with another containerd snippet of contrib/containerd.
func startSnapNodeWith(t *testing.T, snippet string) *snapNode {
	t.Helper()
	return startSnapNodeOpts(t, snippet, harness.WeightsnapdOptions{})
}

// startSnapNodeOpts is startSnapNodeWith with the daemon's options (the
// registry is added to its registries).
func startSnapNodeOpts(t *testing.T, snippet string, opts harness.WeightsnapdOptions) *snapNode {
	t.Helper()
	return startSnapNodeFull(t, snippet, opts, harness.ContainerdOptions{})
}

// startSnapNodeFull is startSnapNodeOpts with containerd's options (the
// registry and the snippet are set).
func startSnapNodeFull(t *testing.T, snippet string, opts harness.WeightsnapdOptions, ctdOpts harness.ContainerdOptions) *snapNode {
	t.Helper()
	harness.Peers(t)
	n := &snapNode{reg: harness.StartRegistry(t)}
	opts.Registries = append(opts.Registries, n.reg.Host)
	n.ws = harness.StartWeightsnapd(t, opts)
	ctdOpts.Registry, ctdOpts.Imports = n.reg, append(ctdOpts.Imports, n.ws.ContainerdSnippetFile(t, snippet))
	n.ctd = harness.StartContainerd(t, ctdOpts)
	n.base = harness.PushBusybox(t, n.reg)
	return n
}

// pushedArtifact is an artifact pushed by a producer node (its own store).
type pushedArtifact struct {
	src   string            // the checkpoint directory it was made from
	root  string            // the producer's store, which pushed it
	ref   string            // its reference
	id    string            // identity digest
	hex   string            // identity hex
	files map[string]string // payload path -> sha256 hex
	bytes int64
}

// weightImage is a weight image of one artifact.
type weightImage struct {
	ref string
	*pushedArtifact
}

// pushArtifact imports a synthetic checkpoint (synth: more dev synth
// flags) on a producer node and pushes it as models/NAME:v1.
func (n *snapNode) pushArtifact(t *testing.T, name, size string, shards int, synth ...string) *pushedArtifact {
	t.Helper()
	src, root, id := ociCheckpoint(t, size, shards, synth...)
	return n.pushImported(t, name, src, root, id)
}

// pushImported pushes the artifact id, imported from src into the store
// root, as models/NAME:v1.
func (n *snapNode) pushImported(t *testing.T, name, src, root, id string) *pushedArtifact {
	t.Helper()
	a := &pushedArtifact{src: src, root: root, ref: n.reg.Ref("models/" + name + ":v1"), id: id, hex: strings.TrimPrefix(id, "sha256:"),
		files: map[string]string{}}
	wsOK(t, root, "push", "--plain-http", id, a.ref)
	var info struct {
		Files []struct {
			Path   string `json:"path"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, root, "inspect", "--json", id)), &info); err != nil {
		t.Fatal(err)
	}
	for _, f := range info.Files {
		a.files[f.Path] = f.SHA256
		a.bytes += f.Size
	}
	if len(a.files) == 0 {
		t.Fatal("the artifact has no files")
	}
	return a
}

// buildImage builds the weight image apps/NAME:v1 over busybox, with each
// artifact at its target ("/models/x", a, "/models/y", b, ...), and
// returns its digest reference.
func (n *snapNode) buildImage(t *testing.T, name string, mounts ...any) string {
	t.Helper()
	return n.buildImageOver(t, n.base, name, "", mounts...)
}

// buildImageOver is buildImage over base ("scratch" for weights only), with
// the image's mode ("" for the node's).
func (n *snapNode) buildImageOver(t *testing.T, base, name, mode string, mounts ...any) string {
	t.Helper()
	args := []string{"image", "build", "--plain-http", "--base", base, "--mode", mode, "-t", n.reg.Ref("apps/" + name + ":v1")}
	for i := 0; i < len(mounts); i += 2 {
		args = append(args, "--weights", mounts[i+1].(*pushedArtifact).ref, "--at", mounts[i].(string))
	}
	return strings.TrimSpace(wsOK(t, t.TempDir(), args...))
}

// noWeightBlobs fails if containerd's content store holds a payload file of a.
func (n *snapNode) noWeightBlobs(t *testing.T, a *pushedArtifact) {
	t.Helper()
	weights := map[string]bool{}
	for _, sum := range a.files {
		weights[sum] = true
	}
	ents, err := os.ReadDir(filepath.Join(n.ctd.Root, "io.containerd.content.v1.content", "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if weights[e.Name()] {
			t.Fatalf("containerd's content store holds weight blob %s", e.Name())
		}
	}
}

// pushWeightImage pushes an artifact and a weight image over busybox with
// the artifact at target.
func (n *snapNode) pushWeightImage(t *testing.T, name, size string, shards int, target string, synth ...string) *weightImage {
	t.Helper()
	a := n.pushArtifact(t, name, size, shards, synth...)
	return &weightImage{ref: n.buildImage(t, name, target, a), pushedArtifact: a}
}

// run runs a container of img through weightsnap and returns its output.
func (n *snapNode) run(img string, args ...string) (string, error) {
	return n.ctd.Nerdctl(append([]string{"--snapshotter", "weightsnap", "run", "--rm", "--net", "none",
		"--security-opt", "seccomp=unconfined", img}, args...)...)
}

// metric returns the value of one sample of the daemon's metrics, 0 when absent.
func (n *snapNode) metric(t *testing.T, sample string) float64 {
	t.Helper()
	text, err := n.ws.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitMetric polls a metric until it has the value wanted.
func (n *snapNode) waitMetric(t *testing.T, sample string, want float64, within time.Duration) {
	t.Helper()
	if err := testenv.Wait(within, func() error {
		if got := n.metric(t, sample); got != want {
			return fmt.Errorf("%s = %v", sample, got)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v, want %v", err, want)
	}
}

// sameInode fails unless a and b are one file.
func sameInode(t *testing.T, a, b string) {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	if sa.Dev != sb.Dev || sa.Ino != sb.Ino {
		t.Fatalf("%s is %d:%d, %s is %d:%d: not one inode", a, sa.Dev, sa.Ino, b, sb.Dev, sb.Ino)
	}
}

// weightSnapshotDir is the directory of the committed weight snapshot that
// holds an artifact at target, found by its files on the host.
func (n *snapNode) weightSnapshotDir(t *testing.T, w *pushedArtifact, target string) string {
	t.Helper()
	var any string
	for p := range w.files {
		any = p
		break
	}
	matches, _ := filepath.Glob(filepath.Join(n.ws.SnapshotRoot, "snapshots", "*", "fs", target, any))
	if len(matches) != 1 {
		t.Fatalf("weight snapshot files %v, want exactly one", matches)
	}
	return strings.TrimSuffix(matches[0], any)
}

// mountsUnder counts the mounts whose options or target name dir.
func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(raw), dir)
}

// cgroupFileBytes is the page cache charged to the memory cgroup of pid:
// "cache" of memory.stat (cgroup v1) or "file" (v2).
func cgroupFileBytes(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var stat, key string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+parts[1]+",", ",memory,"):
			stat, key = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.stat"), "cache"
		case parts[0] == "0" && stat == "":
			stat, key = filepath.Join("/sys/fs/cgroup", parts[2], "memory.stat"), "file"
		}
	}
	body, err := os.ReadFile(stat)
	if err != nil {
		t.Fatalf("memory cgroup of %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s has no %q", stat, key)
	return 0
}

// evict drops the page cache of every file under dir (posix_fadvise
// DONTNEED: only these files, not the machine's whole cache).
func evict(t *testing.T, dir string) {
	t.Helper()
	err := harness.EachFile(dir, func(f *os.File) error {
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// meminfoCached is Cached from /proc/meminfo, in bytes.
func meminfoCached(t *testing.T) int64 {
	t.Helper()
	raw, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "Cached:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
