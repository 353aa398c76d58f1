package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
)

// The OCI end-to-end tests run the weightsnap CLI against a real
// distribution registry on loopback and the real oras CLI, nerdctl and
// containerd, all from test/e2e/deps.

// TestOCIPushOrasPull: weightsnap push, then oras pull of the
// same reference gives the source checkpoint byte for byte, and the manifest
// is a ModelPack artifact carrying the identity annotations.
func TestOCIPushOrasPull(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	dir, root, id := ociCheckpoint(t, "24MiB", 3)
	ref := reg.Ref("models/tiny:v1")
	pushed := strings.TrimSpace(wsOK(t, root, "push", "--plain-http", id, ref))
	if !strings.HasPrefix(pushed, reg.Ref("models/tiny@sha256:")) {
		t.Fatalf("push printed %q", pushed)
	}
	out := filepath.Join(t.TempDir(), "pulled")
	orasRun(t, t.TempDir(), "pull", "--plain-http", "-o", out, ref)
	sameFiles(t, dir, out)
	if ents, _ := os.ReadDir(out); len(ents) != 5 {
		t.Fatalf("oras pulled %d files, want the checkpoint's 5 (the index and pieces layers have no title)", len(ents))
	}

	raw := orasRun(t, t.TempDir(), "manifest", "fetch", "--plain-http", ref)
	var m struct {
		ArtifactType string                     `json:"artifactType"`
		Config       struct{ MediaType string } `json:"config"`
		Annotations  map[string]string          `json:"annotations"`
		Layers       []struct {
			MediaType   string            `json:"mediaType"`
			Annotations map[string]string `json:"annotations"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("oras manifest fetch: %v\n%s", err, raw)
	}
	if m.ArtifactType != "application/vnd.cncf.model.manifest.v1+json" || m.Config.MediaType != "application/vnd.cncf.model.config.v1+json" {
		t.Fatalf("manifest types: %s", raw)
	}
	if m.Annotations["org.weightsnap.identity.digest"] != id || !strings.Contains(m.Annotations["org.weightsnap.identity"], storetest.Revision) {
		t.Fatalf("identity annotations: %v", m.Annotations)
	}
	files := m.Layers
	if last := files[len(files)-1]; last.MediaType == "application/vnd.weightsnap.pieces.v1" {
		files = files[:len(files)-1] // the pieces layer, after the index layer, when a unit is over a piece
	}
	last := files[len(files)-1]
	if last.MediaType != "application/vnd.weightsnap.index.v1+json" {
		t.Fatalf("last layer %s, want the index layer", last.MediaType)
	}
	for _, l := range files[:len(files)-1] {
		p := l.Annotations["org.cncf.model.filepath"]
		if p == "" || l.Annotations["org.opencontainers.image.title"] != p {
			t.Fatalf("layer without file annotations: %+v", l)
		}
		want := "application/vnd.cncf.model.weight.config.v1.raw"
		if strings.HasSuffix(p, ".safetensors") {
			want = "application/vnd.cncf.model.weight.v1.raw"
		}
		if l.MediaType != want {
			t.Fatalf("%s: %s, want %s", p, l.MediaType, want)
		}
	}

	// inspect REF reads the manifest and index layer only.
	info := wsOK(t, root, "inspect", "--plain-http", ref)
	for _, want := range []string{id, "weightsnap-artifact", "model-00001-of-00003.safetensors", "tensors"} {
		if !strings.Contains(info, want) {
			t.Fatalf("inspect %s lacks %q:\n%s", ref, want, info)
		}
	}
}

// TestOCIOrasPushWeightsnapPull: a directory pushed with oras
// (default media types) pulls into the store as the same artifact `import`
// makes of it, READY and fully valid.
func TestOCIOrasPushWeightsnapPull(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	dir, _, importedID := ociCheckpoint(t, "16MiB", 2)
	ents, _ := os.ReadDir(dir)
	args := []string{"push", "--plain-http", reg.Ref("hub/tiny:main")}
	for _, e := range ents {
		args = append(args, e.Name())
	}
	orasRun(t, dir, args...)

	root := filepath.Join(t.TempDir(), "store")
	r := ws(t, root, "pull", "--plain-http", reg.Ref("hub/tiny:main"))
	if r.code != 2 || !strings.Contains(r.errOut, "--revision") {
		t.Fatalf("pull of a foreign artifact without --revision: exit %d\n%s", r.code, r.errOut)
	}
	id := strings.TrimSpace(wsOK(t, root, "pull", "--plain-http", "--revision", storetest.Revision, "--repository", "org/tiny", reg.Ref("hub/tiny:main")))
	if id != importedID {
		t.Fatalf("pulled identity %s, import gave %s", id, importedID)
	}
	if out := wsOK(t, root, "verify", "--full", id); !strings.Contains(out, "valid (full_checksum") {
		t.Fatalf("verify --full: %s", out)
	}
	var list []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, root, "ls", "--json")), &list); err != nil || len(list) != 1 || !strings.EqualFold(list[0].State, "ready") {
		t.Fatalf("ls: %+v %v", list, err)
	}
}

// TestOCIPushDeterministic: the same artifact pushed from two
// store roots gives the same manifest digest.
func TestOCIPushDeterministic(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	dir, root1, id := ociCheckpoint(t, "8MiB", 2)
	root2 := filepath.Join(t.TempDir(), "store2")
	if id2 := strings.TrimSpace(wsOK(t, root2, "import", dir, "--revision", storetest.Revision, "--repository", "org/tiny")); id2 != id {
		t.Fatalf("import gave %s and %s", id, id2)
	}
	a := strings.TrimSpace(wsOK(t, root1, "push", "--plain-http", id, reg.Ref("det/one:v1")))
	b := strings.TrimSpace(wsOK(t, root2, "push", "--plain-http", id, reg.Ref("det/two:v1")))
	da, db := a[strings.Index(a, "@")+1:], b[strings.Index(b, "@")+1:]
	if da != db {
		t.Fatalf("manifest digests differ: %s vs %s", da, db)
	}
	// Pushing again skips every blob and keeps the digest.
	var rep struct {
		Manifest string `json:"manifest"`
		Uploaded int64  `json:"uploaded_bytes"`
	}
	json.Unmarshal([]byte(wsOK(t, root2, "push", "--plain-http", "--json", id, reg.Ref("det/one:v1"))), &rep)
	if rep.Manifest != da || rep.Uploaded != 0 {
		t.Fatalf("second push: %+v", rep)
	}
}

// TestOCIPullResume: a pull killed halfway, run again,
// transfers only what was missing and ends READY and valid.
func TestOCIPullResume(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	dir, src, id := ociCheckpoint(t, "48MiB", 8)
	wsOK(t, src, "push", "--plain-http", id, reg.Ref("models/resume:v1"))
	proxy := newBlobProxy(t, reg)
	ref := proxy.host() + "/models/resume:v1"
	root := filepath.Join(t.TempDir(), "store")
	const total = 48 << 20
	pullArgs := []string{"--root", root, "--config", "", "pull", "--plain-http", "--json", ref}

	proxy.stallAt.Store(total / 2)
	cmd := exec.Command(weightsnapBin(t), pullArgs...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+t.TempDir())
	var firstErr bytes.Buffer
	cmd.Stderr = &firstErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) // if the test fails before the kill
	select {
	case <-proxy.stalled:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the first pull never got halfway:\n%s", firstErr.String())
	}
	// Let the files served whole land in the temp build, then kill: no byte
	// moves while the proxy stalls. (A file killed part-way, zeros
	// included, is hashed back and not reused: store's
	// TestCancelledBuildIsResumed.)
	proxy.landed(t, dir, root)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	first := proxy.served.Load()
	if tmp, _ := os.ReadDir(filepath.Join(root, "tmp")); len(tmp) == 0 {
		t.Fatal("the killed pull left no temp build to resume")
	}

	proxy.stallAt.Store(0)
	proxy.served.Store(0)
	var rep pullReport
	if err := json.Unmarshal([]byte(wsOK(t, root, pullArgs[4:]...)), &rep); err != nil {
		t.Fatal(err)
	}
	second := proxy.served.Load()
	t.Logf("artifact %d bytes; first pull served %d before the kill; second pull served %d, reused %d bytes in %d files",
		rep.Bytes, first, second, rep.Reused, rep.ReusedFiles)
	if !rep.Built || rep.ReusedFiles == 0 || rep.Reused+rep.Fetched != rep.Bytes {
		t.Fatalf("resume report %+v", rep)
	}
	// Only what was missing moved: the payload not reused, plus the index
	// layer and the range probe.
	if slack := int64(1 << 20); second > rep.Bytes-rep.Reused+slack || second >= rep.Bytes {
		t.Fatalf("second pull served %d bytes for %d missing", second, rep.Bytes-rep.Reused)
	}
	if out := wsOK(t, root, "verify", "--full", rep.Identity); !strings.Contains(out, "valid") {
		t.Fatal(out)
	}
}

// TestOCIPullCorrupt: a registry path that flips a byte makes
// the pull fail with a typed digest error, and nothing becomes READY.
func TestOCIPullCorrupt(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	_, src, id := ociCheckpoint(t, "16MiB", 2)
	wsOK(t, src, "push", "--plain-http", id, reg.Ref("models/corrupt:v1"))
	var info struct {
		Files []struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, src, "inspect", "--json", "--plain-http", reg.Ref("models/corrupt:v1"))), &info); err != nil {
		t.Fatal(err)
	}
	victim := ""
	for _, f := range info.Files {
		if strings.HasSuffix(f.Path, ".safetensors") {
			victim = "sha256:" + f.SHA256
		}
	}
	proxy := newBlobProxy(t, reg)
	proxy.corrupt.Store(&victim)
	root := filepath.Join(t.TempDir(), "store")
	for _, ranges := range []string{"on", "off"} {
		r := ws(t, root, "pull", "--plain-http", "--ranges", ranges, "--chunk-size", "1MiB", proxy.host()+"/models/corrupt:v1")
		if r.code != 4 || !strings.Contains(r.errOut, "digest mismatch") {
			t.Fatalf("ranges %s: exit %d, want 4 (data loss) with a digest mismatch:\n%s", ranges, r.code, r.errOut)
		}
		if out := strings.TrimSpace(wsOK(t, root, "ls", "--json")); out != "[]" {
			t.Fatalf("artifacts after a corrupt pull: %s", out)
		}
	}
	// The same pull straight from the registry succeeds.
	wsOK(t, root, "pull", "--plain-http", reg.Ref("models/corrupt:v1"))
}

// TestOCIWeightImage: a weight image over a busybox base runs
// with stock containerd and overlayfs, showing the pointer at the target and,
// beside it, WEIGHTS_NOT_MOUNTED saying what to run instead.
func TestOCIWeightImage(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	ctd := harness.StartContainerd(t, harness.ContainerdOptions{Registry: reg})
	base := harness.PushBusybox(t, reg)
	_, root, id := ociCheckpoint(t, "8MiB", 2)
	art := reg.Ref("models/tiny:v1")
	wsOK(t, root, "push", "--plain-http", id, art)
	img := reg.Ref("apps/tiny-llm:v1")
	var rep struct {
		Reference    string `json:"reference"`
		MountedBlobs int    `json:"mounted_blobs"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, root, "image", "build", "--plain-http", "--json", "--base", base,
		"--weights", art, "--at", "/models/tiny", "-t", img)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.MountedBlobs != 1 {
		t.Fatalf("base layer not mounted from the busybox repository: %+v", rep)
	}
	hexID := strings.TrimPrefix(id, "sha256:")
	out, err := ctd.Nerdctl("run", "--rm", "--net", "none", "--security-opt", "seccomp=unconfined", img,
		"sh", "-c", "ls /models/tiny/.weightsnap/pointers && cat /models/tiny/.weightsnap/pointers/*.json /models/tiny/WEIGHTS_NOT_MOUNTED")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, hexID+".json") || !strings.Contains(out, `"identity":"`+id+`"`) || !strings.Contains(out, `"target":"/models/tiny"`) {
		t.Fatalf("container output lacks the pointer:\n%s", out)
	}
	// Without the weightsnap snapshotter the container finds, beside the pointer, what to run instead.
	for _, want := range []string{"The weights are not mounted here.", art[:strings.LastIndex(art, ":")], "nerdctl --snapshotter weightsnap run", "weightsnap mount"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the container's WEIGHTS_NOT_MOUNTED does not say %q:\n%s", want, out)
		}
	}
	info := wsOK(t, root, "inspect", "--plain-http", img)
	for _, want := range []string{"weight-image", "/models/tiny", id, "model-00001-of-00002.safetensors"} {
		if !strings.Contains(info, want) {
			t.Fatalf("inspect of the weight image lacks %q:\n%s", want, info)
		}
	}
	// A weights-only image over scratch is a valid image too.
	wsOK(t, root, "image", "build", "--plain-http", "--weights", art, "--at", "/w", "-t", reg.Ref("apps/weights:v1"))
	if _, err := ctd.Nerdctl("pull", reg.Ref("apps/weights:v1")); err != nil {
		t.Fatal(err)
	}
}

// TestResolveFromRegistry: a node whose store misses resolves the exact
// identity from the registry (the identity tag push wrote), with no source.
func TestResolveFromRegistry(t *testing.T) {
	harness.Peers(t)
	reg := harness.StartRegistry(t)
	_, rootA, id := ociCheckpoint(t, "8MiB", 2)
	wsOK(t, rootA, "push", "--plain-http", id, reg.Ref("fleet/model:v1"))
	var info struct {
		Identity json.RawMessage `json:"identity"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, rootA, "inspect", "--json", id)), &info); err != nil {
		t.Fatal(err)
	}
	identityFile := filepath.Join(t.TempDir(), "identity.json")
	if err := os.WriteFile(identityFile, info.Identity, 0o644); err != nil {
		t.Fatal(err)
	}
	rootB := filepath.Join(t.TempDir(), "nodeB")
	report := filepath.Join(t.TempDir(), "report.json")
	out := wsOK(t, rootB, "resolve", "--identity", identityFile, "--mode", "required",
		"--registry", reg.Host+"/fleet/model", "--plain-http", "--report", report)
	var rep struct {
		Outcome string `json:"outcome"`
		Source  string `json:"source"`
	}
	raw, _ := os.ReadFile(report)
	json.Unmarshal(raw, &rep)
	if rep.Outcome != "fetched" || rep.Source != "registry" || !strings.Contains(out, id[len("sha256:"):]) {
		t.Fatalf("resolve printed %q, report %s", out, raw)
	}
	wsOK(t, rootB, "verify", "--full", id)
}
