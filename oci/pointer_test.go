package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync/atomic"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/pointer"
)

const testIdentity = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func testPointer() pointer.Pointer {
	return pointer.Pointer{Artifact: "127.0.0.1:5000/models/x@sha256:2222222222222222222222222222222222222222222222222222222222222222",
		ID: artifact.MustParseID(testIdentity), Target: "/models/llama", Files: 3, Bytes: 1 << 30}
}

// TestPointerLayerDeterministic: same pointer, same bytes; sorted entries owned
// by root with mtime 0; the pointer file under the target; the labels set.
func TestPointerLayerDeterministic(t *testing.T) {
	a, err := NewPointerLayer(testPointer())
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPointerLayer(testPointer())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Tar, b.Tar) || a.Desc.Digest != b.Desc.Digest {
		t.Fatal("the same pointer gave two different layers")
	}
	if a.Desc.MediaType != ocispec.MediaTypeImageLayer || a.DiffID != a.Desc.Digest.String() {
		t.Fatalf("descriptor %+v", a.Desc)
	}
	want := []string{"models/", "models/llama/", "models/llama/.weightsnap/", "models/llama/.weightsnap/pointers/",
		"models/llama/.weightsnap/pointers/1111111111111111111111111111111111111111111111111111111111111111.json",
		"models/llama/WEIGHTS_NOT_MOUNTED"}
	var got []string
	for _, e := range readTar(t, a.Tar) {
		h, body := &e.hdr, []byte(e.data)
		got = append(got, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.ModTime.Unix() != 0 {
			t.Fatalf("%s: owner %d:%d %q:%q mtime %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if h.Typeflag == tar.TypeReg && path.Base(h.Name) == pointer.NoticeName {
			if len(body) > pointer.MaxNoticeBytes || !strings.Contains(string(body), testPointer().Artifact) ||
				!strings.Contains(string(body), "nerdctl --snapshotter weightsnap run") || h.Mode != 0o444 {
				t.Fatalf("notice file (mode %o):\n%s", h.Mode, body)
			}
		} else if h.Typeflag == tar.TypeReg {
			var p pointer.Pointer
			if err := json.Unmarshal(body, &p); err != nil || p.ID.String() != testIdentity || p.Target != "/models/llama" || p.Schema != pointer.Schema {
				t.Fatalf("pointer file %s: %v", body, err)
			}
			if h.Mode != 0o444 {
				t.Fatalf("pointer file mode %o", h.Mode)
			}
		} else if h.Mode != 0o755 {
			t.Fatalf("%s mode %o", h.Name, h.Mode)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("entries\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	p, ok, err := PointerFromAnnotations(a.Desc)
	if err != nil || !ok || p.Artifact != testPointer().Artifact || p.ID.String() != testIdentity || p.Target != "/models/llama" {
		t.Fatalf("labels %v", a.Desc.Annotations)
	}
	for _, k := range []string{pointer.LabelArtifact, pointer.LabelIdentity, pointer.LabelTarget} {
		if !strings.HasPrefix(k, "containerd.io/snapshot/") {
			t.Fatalf("label %s is not passed to snapshotters", k)
		}
	}

	other := testPointer()
	other.Target = "/models/other"
	c, _ := NewPointerLayer(other)
	if c.Desc.Digest == a.Desc.Digest {
		t.Fatal("another target gave the same layer")
	}
}

func TestPointerTargetValidation(t *testing.T) {
	for _, bad := range []string{"models/x", "/", "/models/../etc", "/models/./x", "", "/a//b/../c"} {
		p := testPointer()
		p.Target = bad
		if _, err := NewPointerLayer(p); err == nil {
			t.Errorf("target %q accepted", bad)
		}
	}
	if c, err := pointer.CleanTarget("/models/x/"); err != nil || c != "/models/x" {
		t.Fatalf("pointer.CleanTarget: %q %v", c, err)
	}
	p := testPointer()
	p.ID = artifact.ID{}
	if _, err := NewPointerLayer(p); err == nil {
		t.Fatal("a pointer without an identity was accepted")
	}
	p = testPointer()
	p.Target = "/" + strings.Repeat("x", 3000)
	if _, err := NewPointerLayer(p); err == nil {
		t.Fatal("labels past containerd's limit were accepted")
	}
}

// TestComposeImage: base config copied, diff ids and history appended, the
// result deterministic; scratch gives a valid config with a platform.
func TestComposeImage(t *testing.T) {
	pl, _ := NewPointerLayer(testPointer())
	base := []byte(`{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["/bin/sh"]},"rootfs":{"type":"layers","diff_ids":["sha256:3333333333333333333333333333333333333333333333333333333333333333"]},"history":[{"created_by":"crane append"}],"x-extra":{"kept":true}}`)
	layers := []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: "sha256:4444444444444444444444444444444444444444444444444444444444444444", Size: 10}}
	img, err := ComposeImage(base, layers, []*PointerLayer{pl}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ComposeImage(base, layers, []*PointerLayer{pl}, map[string]string{"k": "v"})
	if img.ManifestDesc.Digest != again.ManifestDesc.Digest {
		t.Fatal("composition is not deterministic")
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(img.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 2 || cfg.RootFS.DiffIDs[1].String() != pl.DiffID || len(cfg.History) != 2 || cfg.Config.Cmd[0] != "/bin/sh" {
		t.Fatalf("config %s", img.Config)
	}
	if !strings.Contains(string(img.Config), `"x-extra":{"kept":true}`) {
		t.Fatalf("unknown base config fields were dropped: %s", img.Config)
	}
	var m ocispec.Manifest
	json.Unmarshal(img.Manifest, &m)
	if len(m.Layers) != 2 || m.Layers[1].Annotations[pointer.LabelIdentity] != testIdentity || m.Config.MediaType != ocispec.MediaTypeImageConfig {
		t.Fatalf("manifest %s", img.Manifest)
	}
	if _, err := ComposeImage(base, nil, []*PointerLayer{pl}, nil); err == nil {
		t.Fatal("a config whose diff ids do not match the layers was accepted")
	}

	sb, err := scratchBase("linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	img, err = ComposeImage(sb.config, nil, []*PointerLayer{pl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg = ocispec.Image{}
	json.Unmarshal(img.Config, &cfg)
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.Type != "layers" {
		t.Fatalf("scratch config %s", img.Config)
	}
}

// TestInspectFollowsPointersOnlyToArtifactsOnConfiguredHosts: a weight image
// whose pointers name a host that is not configured, or another weight
// image, is described without following them there.
func TestInspectFollowsPointersOnlyToArtifactsOnConfiguredHosts(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	art := remoteFor(t, f, "models/x:v1")
	if _, err := Push(ctx, l, art, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	inner, err := BuildImage(ctx, remoteFor(t, f, "apps/inner:v1"), ImageOptions{Weights: []WeightMount{{Ref: art.String(), Target: "/w"}}})
	if err != nil {
		t.Fatal(err)
	}
	var otherHits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		http.NotFound(w, r)
	}))
	defer other.Close()
	elsewhere := strings.TrimPrefix(other.URL, "http://")

	// An image with two pointers: one to a host not configured, one to a weight image.
	var pls []*PointerLayer
	for i, ref := range []string{elsewhere + "/models/x@sha256:" + zeros, f.host() + "/apps/inner@" + inner.Manifest} {
		pl, err := NewPointerLayer(pointer.Pointer{Artifact: ref, ID: artifact.MustParseID(testIdentity), Target: []string{"/a", "/b"}[i]})
		if err != nil {
			t.Fatal(err)
		}
		pls = append(pls, pl)
	}
	sb, _ := scratchBase(HostPlatform())
	img, err := ComposeImage(sb.config, nil, pls, nil)
	if err != nil {
		t.Fatal(err)
	}
	target := remoteFor(t, f, "apps/outer:v1")
	for _, b := range []blobSource{{desc: img.ConfigDesc, data: img.Config}, {desc: pls[0].Desc, data: pls[0].Tar}, {desc: pls[1].Desc, data: pls[1].Tar}} {
		if _, err := pushBlob(ctx, target, b, nil, newPushProgress(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pushManifest(ctx, target, img.ManifestDesc, img.Manifest); err != nil {
		t.Fatal(err)
	}
	info, err := InspectRemote(ctx, target, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != "weight-image" || len(info.Pointers) != 2 {
		t.Fatalf("inspect %+v", info)
	}
	if e := info.Pointers[0].Info.Error; !strings.Contains(e, "not a configured registry") || otherHits.Load() != 0 {
		t.Fatalf("pointer to an unconfigured host: %q, %d requests there", e, otherHits.Load())
	}
	if e := info.Pointers[1].Info.Error; !strings.Contains(e, "not a weight artifact") {
		t.Fatalf("pointer to a weight image: %q", e)
	}
	// Configured, the other host is asked (and has nothing).
	info, err = InspectRemote(ctx, target, InspectOptions{Registries: []string{elsewhere}})
	if err != nil || otherHits.Load() == 0 || info.Pointers[0].Info.Error == "" {
		t.Fatalf("configured host: %v, %d requests, %+v", err, otherHits.Load(), info.Pointers[0].Info)
	}
	// A layer with bad labels is reported, not followed.
	bad := ocispec.Descriptor{Annotations: map[string]string{pointer.LabelArtifact: "x:v1", pointer.LabelIdentity: testIdentity, pointer.LabelTarget: "/x"}}
	if _, _, err := PointerFromAnnotations(bad); err == nil {
		t.Fatal("a tag-pinned pointer was accepted")
	}
}

// TestPointerLayerNext: the later pointers ride on a pointer layer's labels,
// as many as fit in half of containerd's limit; the layer's bytes do not
// depend on them.
func TestPointerLayerNext(t *testing.T) {
	p := testPointer()
	plain, err := NewPointerLayer(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		p.Next = append(p.Next, pointer.Pointer{Artifact: fmt.Sprintf("127.0.0.1:5000/models/m%d@sha256:%s", i, zeros), ID: artifact.MustParseID(fmt.Sprintf("sha256:%064x", i))})
	}
	pl, err := NewPointerLayer(p)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := pointer.ParseLabels(pl.Desc.Annotations)
	if err != nil || len(got.Next) == 0 || len(got.Next) >= 40 || got.Next[0].Artifact != p.Next[0].Artifact {
		t.Fatalf("next %d entries, %v", len(got.Next), err)
	}
	if pointer.LabelBytes(pl.Desc.Annotations) > pointer.MaxLabelsBytes/2 || pl.Desc.Digest != plain.Desc.Digest {
		t.Fatalf("labels %d bytes; digest %s vs %s", pointer.LabelBytes(pl.Desc.Annotations), pl.Desc.Digest, plain.Desc.Digest)
	}
}

// readTar reads every entry of the tar stream raw (the reverse of makeTar).
func readTar(t *testing.T, raw []byte) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{hdr: *h, data: string(body)})
	}
}
