package e2e

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestCRIModelPackTarVolume: ModelPack
// artifacts whose layers are tar and tar+zstd (one file each, as modctl
// tars them), pushed by the oras CLI, pulled through weightsnapd's CRI
// socket, are a pod's image volume with every file under model/ with its
// digest and no weight byte in containerd's content store, and their
// artifacts pass a scrub of every digest. Hostile tar layers (hostileTars:
// a ../ path, a link out, a device, a size that lies) are refused by the
// CRI pull and by weightsnap pull, naming the entry and the problem, and
// nothing is published, imaged or mounted.
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
	published := len(c.ids(t))
	if published != 2 {
		t.Fatalf("%d artifacts published, want 2", published)
	}

	mounts := mountsUnder(t, c.ws.Dir) + mountsUnder(t, c.ctd.Dir)
	for _, h := range hostileTars(t) {
		evil := c.sec.Ref("models/hostile-" + h.name + ":v1")
		pushDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(pushDir, "model.tar"), h.blob, 0o644); err != nil {
			t.Fatal(err)
		}
		writeJSON(t, filepath.Join(pushDir, "annotations.json"), `{"model.tar": {"org.cncf.model.filepath": "model.safetensors"}}`)
		writeJSON(t, filepath.Join(pushDir, "model-config.json"), `{"descriptor": {"name": "evil"}, "config": {}, "modelfs": {"type": "layers", "diffIds": []}}`)
		orasRun(t, pushDir, "push", "--plain-http", "-u", c.user, "-p", c.pass, "--artifact-type", "application/vnd.cncf.model.manifest.v1+json",
			"--config", "model-config.json:application/vnd.cncf.model.config.v1+json", "--annotation-file", "annotations.json",
			evil, "model.tar:application/vnd.cncf.model.weight.v1.tar")

		entry := fmt.Sprintf("entry %q", h.entry)
		out, err := c.pull(creds, evil)
		if msg := fmt.Sprint(err); err == nil || !strings.Contains(msg, h.want) || !strings.Contains(strings.ReplaceAll(msg, `\"`, `"`), entry) { // crictl's log escapes quotes
			t.Fatalf("CRI pull of a tar layer with %s: %v\n%s", h.name, err, out)
		}
		if imgs := crictl(t, c.ctd, "images"); strings.Contains(imgs, "models/hostile") {
			t.Fatalf("a refused artifact (%s) left an image:\n%s", h.name, imgs)
		}
		if got := len(c.ids(t)); got != published {
			t.Fatalf("%d artifacts after the refused pull (%s), %d before", got, h.name, published)
		}
		if got := mountsUnder(t, c.ws.Dir) + mountsUnder(t, c.ctd.Dir); got != mounts {
			t.Fatalf("%d mounts after the refused pull (%s), %d before", got, h.name, mounts)
		}
		root := t.TempDir()
		r := runWS(t, []string{"DOCKER_CONFIG=" + c.docker}, []string{"--root", root, "--config", "", "pull", "--plain-http", "--revision", storetest.Revision, evil})
		if r.code == 0 || !strings.Contains(r.errOut, h.want) || !strings.Contains(r.errOut, entry) {
			t.Fatalf("weightsnap pull of a tar layer with %s: exit %d\n%s%s", h.name, r.code, r.out, r.errOut)
		}
		if ls := strings.TrimSpace(wsOK(t, root, "ls", "--json")); ls != "[]" {
			t.Fatalf("weightsnap ls after a refused pull (%s): %s", h.name, ls)
		}
	}
}

// hostileTar is a tar layer for model.safetensors that must be refused
// with want in the error, naming entry.
type hostileTar struct {
	name, entry, want string
	blob              []byte
}

// hostileTars are the tar layers every pull refuses: a path out, a link
// out, a device, and a size that lies (the header says 400 bytes, the
// stream ends after 300).
func hostileTars(t *testing.T) []hostileTar {
	t.Helper()
	const f = "model.safetensors"
	data := make([]byte, 400)
	return []hostileTar{
		{"path-out", "../" + f, "not a clean relative path",
			tarFile(t, "tar", &tar.Header{Typeflag: tar.TypeReg, Name: "../" + f, Size: 4, Mode: 0o644}, data[:4])},
		{"link-out", f, "a link",
			tarFile(t, "tar", &tar.Header{Typeflag: tar.TypeSymlink, Name: f, Linkname: "../../../../etc/shadow"}, nil)},
		{"device", f, "a character device",
			tarFile(t, "tar", &tar.Header{Typeflag: tar.TypeChar, Name: f, Devmajor: 1, Devminor: 1, Mode: 0o644}, nil)},
		{"size-lies", f, "a truncated or corrupt layer",
			tarFile(t, "tar", &tar.Header{Typeflag: tar.TypeReg, Name: f, Size: 400, Mode: 0o644}, data)[:512+300]},
	}
}
