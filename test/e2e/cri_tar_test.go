package e2e

import (
	"archive/tar"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRIModelPackTarVolume (issue 25, done-when 2, tar layers): ModelPack
// artifacts whose layers are tar and tar+zstd (one file each, as modctl
// tars them), pushed by the oras CLI, pulled through weightsnapd's CRI
// socket, are a pod's image volume with every file under model/ with its
// digest and no weight byte in containerd's content store, and their
// artifacts pass a scrub of every digest. A tar layer
// holding a link out is refused by the CRI pull and by weightsnap pull,
// with the entry named, and nothing is published or mounted.
func TestCRIModelPackTarVolume(t *testing.T) {
	c := startCRINode(t)
	creds := c.user + ":" + c.pass
	crictl(t, c.ctd, "pull", c.base)
	for _, layers := range []string{"tar", "tar+zstd"} {
		repo := "models/modelpack-" + strings.ReplaceAll(layers, "+", "-") + ":v1"
		a := &pushedArtifact{files: c.pushModelPack(t, repo, layers)}
		ref := c.sec.Ref(repo)
		if out, err := c.pull(creds, ref); err != nil {
			t.Fatalf("pull of a ModelPack artifact of %s layers through the CRI socket: %v\n%s", layers, err, out)
		}
		name := "modelpack-" + strings.ReplaceAll(layers, "+", "-")
		checkSums(t, runReaderPod(t, c.ctd, readerPod{name: name, image: c.base, dir: "/models/model", volume: ref}), a)
		c.noWeightBlobs(t, a)
	}
	if r := wsWith(t, c.ws.Config, "verify", "--all"); r.code != 0 { // every digest recomputed from the bytes
		t.Fatalf("verify --all: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	published := c.artifacts(t)
	if published != 2 {
		t.Fatalf("%d artifacts published, want 2", published)
	}

	evil := c.sec.Ref("models/hostile:v1")
	pushDir := t.TempDir()
	blob := tarFile(t, "tar", &tar.Header{Typeflag: tar.TypeSymlink, Name: "model.safetensors", Linkname: "../../../../etc/shadow"}, nil)
	if err := os.WriteFile(filepath.Join(pushDir, "model.tar"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(pushDir, "annotations.json"), `{"model.tar": {"org.cncf.model.filepath": "model.safetensors"}}`)
	writeJSON(t, filepath.Join(pushDir, "model-config.json"), `{"descriptor": {"name": "evil"}, "config": {}, "modelfs": {"type": "layers", "diffIds": []}}`)
	orasRun(t, pushDir, "push", "--plain-http", "-u", c.user, "-p", c.pass, "--artifact-type", "application/vnd.cncf.model.manifest.v1+json",
		"--config", "model-config.json:application/vnd.cncf.model.config.v1+json", "--annotation-file", "annotations.json",
		evil, "model.tar:application/vnd.cncf.model.weight.v1.tar")

	out, err := c.pull(creds, evil)
	if err == nil || !strings.Contains(err.Error(), "a link") {
		t.Fatalf("CRI pull of a tar layer with a link out: %v\n%s", err, out)
	}
	if imgs := crictl(t, c.ctd, "images"); strings.Contains(imgs, "models/hostile") {
		t.Fatalf("a refused artifact left an image:\n%s", imgs)
	}
	if got := c.artifacts(t); got != published {
		t.Fatalf("%d artifacts after the refused pull, %d before", got, published)
	}
	root := t.TempDir()
	r := runWS(t, []string{"DOCKER_CONFIG=" + c.docker}, []string{"--root", root, "--config", "", "pull", "--plain-http", "--revision", ociRevision, evil})
	if r.code == 0 || !strings.Contains(r.errOut, "a link") || !strings.Contains(r.errOut, `entry "model.safetensors"`) {
		t.Fatalf("weightsnap pull of a tar layer with a link out: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if ls := strings.TrimSpace(wsOK(t, root, "ls", "--json")); ls != "[]" {
		t.Fatalf("weightsnap ls after a refused pull: %s", ls)
	}
}

// artifacts is how many artifacts weightsnapd's store holds.
func (c *criNode) artifacts(t *testing.T) int {
	t.Helper()
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(wsWith(t, c.ws.Config, "ls", "--json").out), &list); err != nil {
		t.Fatal(err)
	}
	return len(list)
}
