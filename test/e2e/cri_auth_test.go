package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// criNode is a node whose pods pull through weightsnapd's CRI image
// service, with an open registry (sandbox and base images) and one that
// requires a password (weights); the node has no Docker config.
type criNode struct {
	*snapNode
	sec        *harness.Registry
	user, pass string
	docker     string // a Docker config holding the password, for the producer's CLI only
}

func startCRINode(t *testing.T) *criNode {
	t.Helper()
	return startCRINodeWith(t, harness.WeightsnapdOptions{})
}

// startCRINodeWith is startCRINode with weightsnapd's options (its
// registries and CRI upstream are the node's).
func startCRINodeWith(t *testing.T, opts harness.WeightsnapdOptions) *criNode {
	t.Helper()
	harness.Peers(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // the node's daemons read no Docker config
	c := &criNode{snapNode: &snapNode{reg: harness.StartRegistry(t)}, user: "puller", pass: "pw-" + fmt.Sprint(os.Getpid()) + "-Zq8xV3"}
	c.sec = harness.StartAuthRegistry(t, c.user, c.pass)
	upstream := filepath.Join(harness.TempDir(t), "containerd.sock")
	opts.Registries, opts.CRIUpstream = []string{c.reg.Host, c.sec.Host}, upstream
	c.ws = harness.StartWeightsnapd(t, opts)
	c.ctd = harness.StartContainerd(t, harness.ContainerdOptions{Registry: c.reg, Imports: []string{c.ws.ContainerdSnippet(t)}})
	if err := os.Symlink(c.ctd.Socket, upstream); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.ctd.HostsDir, c.sec.Host), 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(c.ctd.HostsDir, c.sec.Host, "hosts.toml"), fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", c.sec.URL, c.sec.URL))
	harness.PushPause(t, c.reg)
	c.base = c.reg.Ref("busybox:latest") // pushed by PushPause
	c.docker = t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(c.user + ":" + c.pass))
	writeJSON(t, filepath.Join(c.docker, "config.json"), fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, c.sec.Host, auth))
	return c
}

// wsAuth runs the weightsnap CLI of the producer, which holds the password.
func (c *criNode) wsAuth(t *testing.T, root string, args ...string) string {
	t.Helper()
	r := runWS(t, []string{"DOCKER_CONFIG=" + c.docker}, append([]string{"--root", root, "--config", ""}, args...))
	if r.code != 0 {
		t.Fatalf("weightsnap %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.errOut)
	}
	return r.out
}

// pull pulls ref through weightsnapd's CRI socket with creds (user:pass).
func (c *criNode) pull(creds, ref string) (string, error) {
	return c.ctd.Crictl("--image-endpoint", "unix://"+c.ws.CRI, "pull", "--creds", creds, ref)
}

// stored says whether weightsnapd's store holds the artifact id.
func (c *criNode) stored(t *testing.T, id string) bool {
	t.Helper()
	return slices.Contains(c.ids(t), id)
}

// ids is the identities of the artifacts weightsnapd's store holds.
func (c *criNode) ids(t *testing.T) []string {
	t.Helper()
	r := wsWith(t, c.ws.Config, "ls", "--json")
	var list []struct {
		Digest string `json:"digest"`
	}
	if err := json.Unmarshal([]byte(r.out), &list); r.code != 0 || err != nil {
		t.Fatalf("weightsnap ls: exit %d, %v\n%s%s", r.code, err, r.out, r.errOut)
	}
	ids := make([]string, len(list))
	for i, a := range list {
		ids[i] = a.Digest
	}
	return ids
}

// noPassword fails if the password is in any file of the store, snapshot,
// containerd and state roots or in any log (all under the daemons' directories).
func (c *criNode) noPassword(t *testing.T) {
	t.Helper()
	for _, dir := range []string{c.ws.Dir, c.ctd.Dir} {
		out, err := exec.Command("grep", "-rlsF", "--", c.pass, dir).Output()
		if len(out) > 0 {
			t.Fatalf("the password is in %s", out)
		}
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 2) {
			t.Fatal(err)
		}
	}
}

// TestCRIPullSecrets: the node has no
// Docker config; a weight image whose artifact sits in a registry that
// requires a password, pulled through weightsnapd's CRI socket with
// crictl pull --creds, runs as a pod's container, and a weights-only image
// of another artifact of that registry, pulled the same way, is another
// pod's image volume: both read every weight file with its source digest.
// Wrong credentials fail naming the registry and unauthorized, and publish
// nothing. The password is nowhere on disk or in a log.
func TestCRIPullSecrets(t *testing.T) {
	c := startCRINode(t)
	img, id, files := c.pushPrivateWeightImage(t, "private", "8MiB")

	out, err := c.pull(c.user+":wrong-"+c.pass[:2], img)
	if err == nil || !strings.Contains(err.Error(), c.sec.Host) || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Fatalf("a pull with wrong credentials: %v\n%s", err, out)
	}
	if c.stored(t, id) {
		t.Fatalf("a pull with wrong credentials published the artifact %s", id)
	}
	if imgs := crictl(t, c.ctd, "images"); strings.Contains(imgs, "apps/private") {
		t.Fatalf("a pull with wrong credentials left an image:\n%s", imgs)
	}

	if out, err := c.pull(c.user+":"+c.pass, img); err != nil {
		t.Fatalf("pull through the CRI socket: %v\n%s", err, out)
	}
	logs := runReaderPod(t, c.ctd, readerPod{name: "private", image: img, dir: "/llama"})
	checkSums(t, logs, &pushedArtifact{files: files})

	vol, volID, volFiles := c.pushPrivateWeightsOnly(t, "private-volume", "6MiB")
	if out, err := c.pull(c.user+":"+c.pass, vol); err != nil {
		t.Fatalf("pull of a weights-only image through the CRI socket: %v\n%s", err, out)
	}
	crictl(t, c.ctd, "pull", c.base) // the volume pod's container, from the open registry
	a := &pushedArtifact{files: volFiles}
	checkSums(t, runReaderPod(t, c.ctd, readerPod{name: "private-volume", image: c.base, dir: "/models/llama", volume: vol}), a)
	if !c.stored(t, volID) {
		t.Fatalf("the weights-only image's artifact %s is not in the store", volID)
	}
	c.noWeightBlobs(t, a)
	c.noPassword(t)
}

// TestCRIModelPackVolume (raw layers and a plain
// oras push): a ModelPack artifact pushed by the oras CLI (raw layers,
// filepath annotations) and a plain oras push of files with an
// --artifact-type (the empty config, each file named by its title), both
// into the secured registry and pulled through weightsnapd's CRI socket,
// are pods' image volumes: the containers read every file under model/
// with its digest, and containerd's content store holds none of the weight
// bytes. Two pods of the ModelPack artifact read the store's inodes: every
// file either container sees is the store's payload file (device and inode).
func TestCRIModelPackVolume(t *testing.T) {
	c := startCRINode(t)
	creds := c.user + ":" + c.pass
	crictl(t, c.ctd, "pull", c.base)
	ref := c.sec.Ref("models/modelpack:v1")
	a := &pushedArtifact{files: c.pushModelPack(t, "models/modelpack:v1", "raw")}
	if out, err := c.pull(creds, ref); err != nil {
		t.Fatalf("pull of a ModelPack artifact through the CRI socket: %v\n%s", err, out)
	}
	ids := c.ids(t)
	if len(ids) != 1 {
		t.Fatalf("the store holds %v, want the pulled artifact alone", ids)
	}
	store := filepath.Join(c.ws.Root, "artifacts", strings.TrimPrefix(ids[0], "sha256:"))
	for _, name := range []string{"modelpack", "modelpack-2"} {
		logs := runReaderPod(t, c.ctd, readerPod{name: name, image: c.base, dir: "/models/model", volume: ref, inodes: true})
		checkSums(t, logs, a)
		c.storeInodes(t, logs, store, a)
	}
	c.noWeightBlobs(t, a)

	plain := c.sec.Ref("models/plain:v1")
	a = &pushedArtifact{files: c.orasPushPlain(t, plain)}
	if out, err := c.pull(creds, plain); err != nil {
		t.Fatalf("pull of a plain oras artifact through the CRI socket: %v\n%s", err, out)
	}
	checkSums(t, runReaderPod(t, c.ctd, readerPod{name: "plain", image: c.base, dir: "/models/model", volume: plain}), a)
	c.noWeightBlobs(t, a)
	c.noPassword(t)
}

// storeInodes fails unless every file of a that a reader pod's log
// (readerPod.inodes) shows is the store's payload file under store. The
// container sees the weight snapshot through containerd's overlay mount of
// it: the device is the overlay's, and overlayfs over one filesystem
// passes the lower file's inode number through, so the pod's inode number
// is compared with the store's, and on the host the snapshot's file is the
// store's (device and inode).
func (c *criNode) storeInodes(t *testing.T, logs, store string, a *pushedArtifact) {
	t.Helper()
	seen := map[string]string{}
	for _, line := range strings.Split(logs, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "inode" {
			seen[f[1]] = f[3]
		}
	}
	snap := c.weightSnapshotDir(t, a, "/model") // an artifact image's target
	for p := range a.files {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(store, p), &st); err != nil {
			t.Fatal(err)
		}
		if seen[p] != fmt.Sprint(st.Ino) {
			t.Fatalf("%s is inode %q in the pod, the store's is %d\n%s", p, seen[p], st.Ino, logs)
		}
		sameInode(t, filepath.Join(snap, p), filepath.Join(store, p))
	}
}

// pushPrivateWeightImage pushes an artifact as models/NAME:v1 and a weight
// image over busybox with it at /llama as apps/NAME:v1, both to the secured
// registry, and returns the image, the artifact's identity and its files'
// sha256.
func (c *criNode) pushPrivateWeightImage(t *testing.T, name, size string) (img, id string, files map[string]string) {
	t.Helper()
	// The base lives in the secured registry too: image build mounts, never copies, base blobs.
	orasRun(t, t.TempDir(), "cp", "--from-plain-http", "--to-plain-http", "--to-username", c.user, "--to-password", c.pass,
		c.base, c.sec.Ref("library/busybox:latest"))
	return c.pushPrivateImage(t, name, size, c.sec.Ref("library/busybox:latest"))
}

// pushPrivateWeightsOnly is pushPrivateWeightImage of a weights-only image
// (no base: the pointer layer alone), to be an image volume.
func (c *criNode) pushPrivateWeightsOnly(t *testing.T, name, size string) (img, id string, files map[string]string) {
	t.Helper()
	return c.pushPrivateImage(t, name, size, "scratch")
}

// pushPrivateImage pushes an artifact as models/NAME:v1 and an image over
// base with it at /llama as apps/NAME:v1.
func (c *criNode) pushPrivateImage(t *testing.T, name, size, base string) (img, id string, files map[string]string) {
	t.Helper()
	_, root, id := ociCheckpoint(t, size, 2)
	art := c.sec.Ref("models/" + name + ":v1")
	c.wsAuth(t, root, "push", "--plain-http", id, art)
	files = inspectFiles(t, root, id)
	img = c.sec.Ref("apps/" + name + ":v1")
	c.wsAuth(t, t.TempDir(), "image", "build", "--plain-http", "--base", base, "--weights", art, "--at", "/llama", "-t", img)
	return img, id, files
}

// pushModelPack pushes a synthetic checkpoint with the oras CLI as a
// ModelPack artifact to repo in the secured registry (orasPushModelPack)
// and returns the files' sha256.
func (c *criNode) pushModelPack(t *testing.T, repo, layers string) map[string]string {
	t.Helper()
	dir, _, _ := ociCheckpoint(t, "8MiB", 2)
	return orasPushModelPack(t, dir, c.sec.Ref(repo), layers, "-u", c.user, "-p", c.pass)
}

// orasPushModelPack pushes the files of dir with the oras CLI as a
// ModelPack artifact to ref, with login (oras's credential flags) if any:
// one layer per file with its name as its filepath annotation, each of the
// layers kind: "raw" (the file itself, linked), "tar" or "tar+zstd" (the
// file tarred, as modctl tars it). It returns the files' sha256.
func orasPushModelPack(t *testing.T, dir, ref, layers string, login ...string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	ann := map[string]map[string]string{}
	args := append(append([]string{"push", "--plain-http"}, login...), "--artifact-type", "application/vnd.cncf.model.manifest.v1+json",
		"--config", "model-config.json:application/vnd.cncf.model.config.v1+json", "--annotation-file", "annotations.json", ref)
	pushDir := t.TempDir()
	for _, e := range ents {
		src := filepath.Join(dir, e.Name())
		files[e.Name()] = harness.FileSHA256(t, src)
		mt := "application/vnd.cncf.model.weight.config.v1." + layers
		if strings.HasSuffix(e.Name(), ".safetensors") {
			mt = "application/vnd.cncf.model.weight.v1." + layers
		}
		name := e.Name()
		if layers == "raw" {
			if err := os.Link(src, filepath.Join(pushDir, name)); err != nil {
				t.Fatal(err)
			}
		} else {
			raw, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			name += ".tar"
			blob := tarFile(t, layers, &tar.Header{Typeflag: tar.TypeReg, Name: e.Name(), Size: int64(len(raw)), Mode: 0o644}, raw)
			if err := os.WriteFile(filepath.Join(pushDir, name), blob, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ann[name] = map[string]string{"org.cncf.model.filepath": e.Name()}
		args = append(args, name+":"+mt)
	}
	raw, _ := json.Marshal(ann)
	writeJSON(t, filepath.Join(pushDir, "annotations.json"), string(raw))
	writeJSON(t, filepath.Join(pushDir, "model-config.json"), `{"descriptor": {"name": "tiny"}, "config": {}, "modelfs": {"type": "layers", "diffIds": []}}`)
	orasRun(t, pushDir, args...)
	return files
}

// orasPushPlain pushes the files of a synthetic checkpoint to ref in the
// secured registry with a plain oras push (an --artifact-type, no config:
// oras writes the empty one; each layer named by its title), checks that
// the manifest is such an artifact, and returns the files' sha256.
func (c *criNode) orasPushPlain(t *testing.T, ref string) map[string]string {
	t.Helper()
	dir, _, _ := ociCheckpoint(t, "4MiB", 2)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	args := []string{"push", "--plain-http", "-u", c.user, "-p", c.pass, "--artifact-type", "application/vnd.example.weights.v1", ref}
	for _, e := range ents {
		files[e.Name()] = harness.FileSHA256(t, filepath.Join(dir, e.Name()))
		args = append(args, e.Name())
	}
	orasRun(t, dir, args...)
	var m struct {
		ArtifactType string `json:"artifactType"`
		Config       struct {
			MediaType string `json:"mediaType"`
		} `json:"config"`
	}
	raw := orasRun(t, dir, "manifest", "fetch", "--plain-http", "-u", c.user, "-p", c.pass, ref)
	if err := json.Unmarshal([]byte(raw), &m); err != nil || m.Config.MediaType != "application/vnd.oci.empty.v1+json" || m.ArtifactType == "" {
		t.Fatalf("oras push wrote no artifact with the empty config (%v):\n%s", err, raw)
	}
	return files
}

// tarFile is a tar layer of one entry, compressed as layers says ("tar" or "tar+zstd").
func tarFile(t *testing.T, layers string, hdr *tar.Header, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if layers != "tar+zstd" {
		return buf.Bytes()
	}
	zw, _ := zstd.NewWriter(nil)
	return zw.EncodeAll(buf.Bytes(), nil)
}

// inspectFiles is the sha256 of every payload file of the artifact id in
// the store at root.
func inspectFiles(t *testing.T, root, id string) map[string]string {
	t.Helper()
	var info struct {
		Files []struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(wsOK(t, root, "inspect", "--json", id)), &info); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range info.Files {
		files[f.Path] = f.SHA256
	}
	if len(files) == 0 {
		t.Fatal("the artifact has no files")
	}
	return files
}

// TestUnseenWeightUnpack: a weight image run without
// weightsnap's snapshotter (nerdctl's default is overlayfs) starts with only
// the pointer files; weightsnapd, which never sees such a layer, finds the
// unpack among containerd's images, logs it naming the image and the
// snapshotter, and counts it once.
func TestUnseenWeightUnpack(t *testing.T) {
	c := startCRINode(t)
	// unseen pulls ref by overlayfs and waits until weightsnapd counted it
	// (want in all) and logged it, naming the image and the snapshotter.
	unseen := func(ref string, want float64) {
		t.Helper()
		if _, err := c.ctd.Nerdctl("pull", ref); err != nil { // unpacked by overlayfs
			t.Fatal(err)
		}
		c.waitMetric(t, "weightsnap_unseen_weight_unpacks_total", want, 20*time.Second)
		if err := testenv.Wait(10*time.Second, func() error {
			raw, _ := os.ReadFile(c.ws.Proc.Log)
			for _, line := range strings.Split(string(raw), "\n") {
				if strings.Contains(line, "unpacked by another snapshotter") && strings.Contains(line, ref) && strings.Contains(line, `"snapshotter":"overlayfs"`) {
					return nil
				}
			}
			return errors.New("not logged")
		}); err != nil {
			t.Fatalf("weightsnapd did not log the unpack of %s: %v\n%s", ref, err, harness.Tail(c.ws.Proc.Log, 20))
		}
	}
	w := c.pushWeightImage(t, "unseen", "4MiB", 1, "/models/x")
	unseen(w.ref, 1)
	// Through weightsnap, another weight image is not counted; the first is
	// not counted again. The watch looks at every image in turn, one look
	// after the other: the look that counts a third image unpacked by
	// overlayfs began after that pull; once a fourth, pulled after the third
	// was logged, is counted too, that look has ended, having seen both
	// earlier images again.
	w2 := c.pushWeightImage(t, "seen", "4MiB", 1, "/models/y")
	if _, err := c.ctd.Nerdctl("--snapshotter", "weightsnap", "pull", w2.ref); err != nil {
		t.Fatal(err)
	}
	unseen(c.pushWeightImage(t, "third", "1MiB", 1, "/models/z").ref, 2)
	unseen(c.pushWeightImage(t, "fourth", "1MiB", 1, "/models/z").ref, 3)
	if got := c.metric(t, "weightsnap_unseen_weight_unpacks_total"); got != 3 {
		t.Fatalf("%v unseen unpacks counted, want 3: the first, the third and the fourth", got)
	}
}
