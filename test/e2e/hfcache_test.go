package e2e

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// TestHFCacheView: two artifacts laid out
// with --layout hf in one cache root, from a host mount (weightsnap mount)
// and from an image volume (a weights-only image built with image build
// --layout hf, mounted by containerd's CRI through weightsnap), look to the
// Hugging Face hub's own JavaScript reader (scanCacheDir) exactly as a hub
// cache of the same files written by hand as huggingface_hub writes it:
// repo ids and types, revisions, refs, file names and sizes, blob counts,
// no warnings. The blobs are the store's inodes (host mount), and the pod
// reads every file through the snapshot's links with its source digest.
func TestHFCacheView(t *testing.T) {
	reader := harness.FindHubReader(t)
	n := startSnapNode(t)
	harness.PushPause(t, n.reg)
	a := n.pushArtifact(t, "hf-a", "8MiB", 2) // repository org/tiny
	b := n.pushArtifact(t, "hf-b", "4MiB", 1) // org/tiny too: laid out as org/other
	repos := []hfRepo{{a, "org/tiny"}, {b, "org/other"}}

	want := reader.Scan(t, handHubCache(t, repos))
	if len(want.Repos) != 2 || len(want.Warnings) != 0 {
		t.Fatalf("the hand-written cache reads as %+v", want)
	}
	for i, r := range want.Repos {
		if r.Type != "model" || len(r.Revisions) != 1 || r.Revisions[0].Commit != storetest.Revision ||
			!reflect.DeepEqual(r.Revisions[0].Refs, []string{"main"}) || len(r.Revisions[0].Files) == 0 {
			t.Fatalf("the hand-written cache's repo %d reads as %+v", i, r)
		}
	}
	t.Logf("scanCacheDir of the hand-written cache: %d repos, %d bytes", len(want.Repos), want.Size)

	// Host mounts: one repository folder each, in one cache root.
	host := filepath.Join(harness.TempDir(t), "hub")
	for i, args := range [][]string{{a.ref, host}, {"--repo", "org/other", b.ref, host}} {
		if r := wsWith(t, n.ws.Config, append([]string{"mount", "--plain-http", "--layout", "hf"}, args...)...); r.code != 0 {
			t.Fatalf("weightsnap mount --layout hf: exit %d\n%s%s", r.code, r.out, r.errOut)
		}
		folder := filepath.Join(host, "models--"+strings.ReplaceAll(repos[i].repo, "/", "--"))
		t.Cleanup(func() { wsWith(t, n.ws.Config, "umount", folder) })
		for p, sum := range repos[i].a.files {
			sameInode(t, filepath.Join(folder, "blobs", sum), filepath.Join(n.ws.Root, "artifacts", repos[i].a.hex, p))
		}
	}
	sameHubView(t, "the host mounts", reader.Scan(t, host), want, repos)

	// An image volume through the CRI: both artifacts at /hub of one weights-only image.
	img := strings.TrimSpace(wsOK(t, t.TempDir(), "image", "build", "--plain-http", "--base", "scratch", "--layout", "hf",
		"--weights", a.ref, "--at", "/hub", "--weights", b.ref, "--at", "/hub", "--repo", "org/tiny", "--repo", "org/other",
		"-t", n.reg.Ref("apps/hf:v1")))
	if out := wsOK(t, t.TempDir(), "inspect", "--plain-http", img); !strings.Contains(out, "/hub/models--org--other (layout hf, repo org/other) <- "+b.ref[:strings.LastIndex(b.ref, ":")]) {
		t.Fatalf("weightsnap inspect of the hf image does not name the layout:\n%s", out)
	}
	crictl(t, n.ctd, "pull", img)
	crictl(t, n.ctd, "pull", n.base)
	logs := runReaderPod(t, n.ctd, readerPod{name: "hf", image: n.base, volume: img,
		dir: "/models/hub/models--org--tiny/snapshots/" + storetest.Revision})
	checkSums(t, logs, a)
	cid := crictl(t, n.ctd, "ps", "-q", "--name", "reader")
	pid, err := strconv.Atoi(crictl(t, n.ctd, "inspect", "-o", "go-template", "--template", "{{.info.pid}}", cid))
	if err != nil {
		t.Fatalf("the reader's pid: %v", err)
	}
	// The container's image volume, mounted on the host as the container has it (the mount of
	// another mount namespace cannot be bind-mounted here): the same overlay of the same layers.
	volume := harness.TempDir(t)
	remountVolume(t, pid, "/models", volume)
	t.Cleanup(func() { unix.Unmount(volume, unix.MNT_DETACH) })
	volume = filepath.Join(volume, "hub")
	sameHubView(t, "the image volume", reader.Scan(t, volume), want, repos)
	n.noWeightBlobs(t, a)
}

// hfRepo is an artifact and the repo id it is laid out as.
type hfRepo struct {
	a    *pushedArtifact
	repo string
}

// handHubCache writes, in a new cache root, each artifact's source files as
// huggingface_hub's download writes them: refs/main holding the commit,
// blobs/<etag> (sha256 for a safetensors file, an LFS file; the git blob
// sha1 for the small files git keeps), and snapshots/<commit>/<path> a
// relative link to ../../blobs/<etag>, one more ../ per subfolder.
func handHubCache(t *testing.T, repos []hfRepo) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "hub")
	for _, r := range repos {
		folder := filepath.Join(root, "models--"+strings.ReplaceAll(r.repo, "/", "--"))
		for p, sum := range r.a.files {
			raw, err := os.ReadFile(filepath.Join(r.a.src, p))
			if err != nil {
				t.Fatal(err)
			}
			etag := sum
			if !strings.HasSuffix(p, ".safetensors") {
				h := sha1.New()
				fmt.Fprintf(h, "blob %d\x00", len(raw))
				h.Write(raw)
				etag = hex.EncodeToString(h.Sum(nil))
			}
			snap := filepath.Join(folder, "snapshots", storetest.Revision, p)
			for _, d := range []string{filepath.Join(folder, "blobs"), filepath.Dir(snap)} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(folder, "blobs", etag), raw, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(strings.Repeat("../", 2+strings.Count(p, "/"))+"blobs/"+etag, snap); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(folder, "refs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(folder, "refs", "main"), []byte(storetest.Revision), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// sameHubView fails unless got is want as the hub sees it: every field but
// the blobs' names, which are weightsnap's sha256 of each file (the hub
// names a small git file by its git blob sha1).
func sameHubView(t *testing.T, what string, got, want harness.HubView, repos []hfRepo) {
	t.Helper()
	sums := map[string]map[string]string{}
	for _, r := range repos {
		sums[r.repo] = r.a.files
	}
	anonymous := func(v harness.HubView, check bool) harness.HubView {
		var out harness.HubView
		out.Size, out.Warnings = v.Size, v.Warnings
		for _, r := range v.Repos {
			rr := r
			rr.Revisions = nil
			for _, rev := range r.Revisions {
				rv := rev
				rv.Files = nil
				for _, f := range rev.Files {
					if check && f.Blob != sums[r.ID][f.Path] {
						t.Errorf("%s: %s %s is blob %s, want its sha256 %s", what, r.ID, f.Path, f.Blob, sums[r.ID][f.Path])
					}
					f.Blob = ""
					rv.Files = append(rv.Files, f)
				}
				rr.Revisions = append(rr.Revisions, rv)
			}
			out.Repos = append(out.Repos, rr)
		}
		return out
	}
	g, w := anonymous(got, true), anonymous(want, false)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("scanCacheDir of %s:\n%+v\nof a hub cache of the same files:\n%+v", what, g, w)
	}
	t.Logf("scanCacheDir of %s: the same as of the hand-written cache (%d repos, %d bytes, no warnings)", what, len(g.Repos), g.Size)
}

// remountVolume mounts on dir, read-only, the overlay that process pid has
// at target in its mount namespace (from its mountinfo: the same layers;
// its upper directory, checked empty, left out), so the host sees what the
// container sees there.
func remountVolume(t *testing.T, pid int, target, dir string) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || f[4] != target {
			continue
		}
		if g[0] != "overlay" {
			t.Fatalf("%s in the container is %s, not an overlay: %s", target, g[0], line)
		}
		// Its layers, without the volume's own (empty) upper directory, which its mount holds.
		var lower string
		for _, o := range strings.Split(g[2], ",") {
			if strings.HasPrefix(o, "lowerdir=") {
				lower = o
			} else if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				if ents, err := os.ReadDir(v); err != nil || len(ents) != 0 {
					t.Fatalf("the volume's upper directory %s holds %v (%v)", v, ents, err)
				}
			}
		}
		opts := []string{lower}
		if err := unix.Mount("overlay", dir, "overlay", unix.MS_RDONLY, strings.Join(opts, ",")); err != nil {
			t.Fatalf("mount the container's %s (%s) on %s: %v", target, g[2], dir, err)
		}
		return
	}
	t.Fatalf("no mount at %s in process %d:\n%s", target, pid, raw)
}
