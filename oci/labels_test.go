package oci

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func testLabels() map[string]string {
	p := testPointer()
	return map[string]string{LabelArtifact: p.Artifact, LabelIdentity: p.Identity, LabelTarget: p.Target,
		"containerd.io/snapshot.ref": "sha256:" + zeros}
}

func TestParsePointerLabels(t *testing.T) {
	pin := "@sha256:" + strings.Repeat("2", 64)
	for _, tc := range []struct {
		name  string
		edit  func(map[string]string)
		ok    bool   // a weight layer
		label string // the label the error names; "" for no error
	}{
		{"valid", func(map[string]string) {}, true, ""},
		{"valid with next", func(m map[string]string) {
			m[LabelNext] = "sha256:" + strings.Repeat("3", 64) + "=reg.example/a" + pin + ",sha256:" + strings.Repeat("4", 64) + "=reg.example/b" + pin
		}, true, ""},
		{"preferred", func(m map[string]string) { m[LabelMode] = ModePreferred }, true, ""},
		{"mode unknown", func(m map[string]string) { m[LabelMode] = "sometimes" }, true, LabelMode},
		{"mode empty", func(m map[string]string) { m[LabelMode] = "" }, true, LabelMode},
		{"ordinary layer", func(m map[string]string) { clear(m); m["containerd.io/snapshot.ref"] = "x" }, false, ""},
		{"relative target", func(m map[string]string) { m[LabelTarget] = "models/x" }, true, LabelTarget},
		{"dot-dot target", func(m map[string]string) { m[LabelTarget] = "/models/../etc" }, true, LabelTarget},
		{"root target", func(m map[string]string) { m[LabelTarget] = "/" }, true, LabelTarget},
		{"unclean target", func(m map[string]string) { m[LabelTarget] = "/models//x/" }, true, LabelTarget},
		{"tag instead of digest", func(m map[string]string) { m[LabelArtifact] = "127.0.0.1:5000/models/x:v1" }, true, LabelArtifact},
		{"tag and digest", func(m map[string]string) { m[LabelArtifact] = "127.0.0.1:5000/models/x:v1" + pin }, true, LabelArtifact},
		{"no repository", func(m map[string]string) { m[LabelArtifact] = "127.0.0.1:5000" + pin }, true, LabelArtifact},
		{"sha512 pin", func(m map[string]string) {
			m[LabelArtifact] = "127.0.0.1:5000/models/x@sha512:" + strings.Repeat("2", 128)
		}, true, LabelArtifact},
		{"identity not sha256", func(m map[string]string) { m[LabelIdentity] = "blake3:" + strings.Repeat("1", 64) }, true, LabelIdentity},
		{"identity upper case", func(m map[string]string) { m[LabelIdentity] = "sha256:" + strings.Repeat("A", 64) }, true, LabelIdentity},
		{"identity short", func(m map[string]string) { m[LabelIdentity] = "sha256:1111" }, true, LabelIdentity},
		{"missing target", func(m map[string]string) { delete(m, LabelTarget) }, true, LabelTarget},
		{"only an unknown weightsnap label", func(m map[string]string) {
			clear(m)
			m[labelPrefix+"future"] = "x"
		}, true, LabelArtifact},
		{"oversized", func(m map[string]string) { m[LabelTarget] = "/" + strings.Repeat("x", 4000) }, true, labelPrefix + "*"},
		{"next entry without identity", func(m map[string]string) { m[LabelNext] = "reg.example/m" + pin }, true, LabelNext},
		{"next entry by tag", func(m map[string]string) { m[LabelNext] = testIdentity + "=reg.example/m:v1" }, true, LabelNext},
		{"next entry empty", func(m map[string]string) { m[LabelNext] = testIdentity + "=reg.example/m" + pin + "," }, true, LabelNext},
		{"oversized in sum", func(m map[string]string) {
			m[LabelTarget] = "/" + strings.Repeat("x", 2500)
			m[labelPrefix+"note"] = strings.Repeat("y", 1500)
		}, true, labelPrefix + "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testLabels()
			tc.edit(m)
			p, ok, err := ParsePointerLabels(m)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if tc.label == "" {
				if err != nil {
					t.Fatal(err)
				}
				if ok && (p.Artifact != testPointer().Artifact || p.Identity != testIdentity || p.Target != "/models/llama" || p.Mode != m[LabelMode]) {
					t.Fatalf("pointer %+v", p)
				}
				if next := m[LabelNext]; next != "" && len(p.Next) != strings.Count(next, ",")+1 {
					t.Fatalf("next %q parsed as %+v", next, p.Next)
				}
				return
			}
			var le *LabelError
			if !errors.As(err, &le) || le.Label != tc.label || !errdefs.IsInvalidArgument(err) || len(le.Value) > 100 {
				t.Fatalf("err %v, want a *LabelError on %s", err, tc.label)
			}
		})
	}
}

// FuzzParsePointerLabels: whatever the labels, an accepted pointer names a
// digest-pinned artifact, a sha256 identity and a target that stays inside
// any directory it is joined to.
func FuzzParsePointerLabels(f *testing.F) {
	p := testPointer()
	f.Add(p.Artifact, p.Identity, p.Target, "")
	f.Add("127.0.0.1:5000/models/x:v1", p.Identity, "/models/../../etc", "x")
	f.Add("localhost/a@sha256:"+zeros, "sha256:"+zeros, "/a/b/c", strings.Repeat("z", 5000))
	f.Add("host/repo@sha256:"+zeros+"/../x", "sha256:"+zeros+"\n", "/w\x00/x", "")
	f.Add(p.Artifact, p.Identity, p.Target, p.Identity+"="+p.Artifact+","+p.Identity+"="+p.Artifact)
	f.Add(p.Artifact, p.Identity, p.Target, p.Identity+"=,=")
	f.Fuzz(func(t *testing.T, art, id, target, extra string) {
		labels := map[string]string{LabelArtifact: art, LabelIdentity: id, LabelTarget: target}
		if extra != "" {
			labels[LabelNext] = extra
		}
		p, ok, err := ParsePointerLabels(labels)
		if !ok {
			t.Fatal("weight labels were taken for an ordinary layer")
		}
		if err != nil {
			return
		}
		for _, q := range append([]Pointer{p}, p.Next...) {
			if !identityRE.MatchString(q.Identity) || checkPinnedRef(q.Artifact) != nil || PointerHost(q) == "" {
				t.Fatalf("accepted %+v", q)
			}
		}
		if j := filepath.Join("/snap/fs", p.Target); !strings.HasPrefix(j, "/snap/fs/") || j != "/snap/fs"+p.Target {
			t.Fatalf("target %q escapes: %q", p.Target, j)
		}
		if len(art)+len(id)+len(target)+len(extra) > maxLabelsBytes {
			t.Fatalf("accepted %d bytes of labels", len(art)+len(id)+len(target)+len(extra))
		}
	})
}

// TestInspectFollowsPointersOnlyToArtifactsOnConfiguredHosts: a weight image
// whose pointers name a host that is not configured, or another weight
// image, is described without following them there.
func TestInspectFollowsPointersOnlyToArtifactsOnConfiguredHosts(t *testing.T) {
	ctx := context.Background()
	_, src := checkpoint(t, 1<<20, 1)
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
		pl, err := NewPointerLayer(Pointer{Artifact: ref, Identity: testIdentity, Target: []string{"/a", "/b"}[i]})
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
	bad := ocispec.Descriptor{Annotations: map[string]string{LabelArtifact: "x:v1", LabelIdentity: testIdentity, LabelTarget: "/x"}}
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
		p.Next = append(p.Next, Pointer{Artifact: fmt.Sprintf("127.0.0.1:5000/models/m%d@sha256:%s", i, zeros), Identity: fmt.Sprintf("sha256:%064x", i)})
	}
	pl, err := NewPointerLayer(p)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := ParsePointerLabels(pl.Desc.Annotations)
	if err != nil || len(got.Next) == 0 || len(got.Next) >= 40 || got.Next[0].Artifact != p.Next[0].Artifact {
		t.Fatalf("next %d entries, %v", len(got.Next), err)
	}
	if labelBytes(pl.Desc.Annotations) > maxLabelsBytes/2 || pl.Desc.Digest != plain.Desc.Digest {
		t.Fatalf("labels %d bytes; digest %s vs %s", labelBytes(pl.Desc.Annotations), pl.Desc.Digest, plain.Desc.Digest)
	}
}

func TestParsePointerFile(t *testing.T) {
	good, err := PointerFile(testPointer())
	if err != nil {
		t.Fatal(err)
	}
	preferred := testPointer()
	preferred.Mode = ModePreferred
	withMode, _ := PointerFile(preferred)
	for _, tc := range []struct {
		name string
		raw  string
		ok   bool
	}{
		{"good", string(good), true},
		{"with a mode", string(withMode), true},
		{"unknown field", strings.Replace(string(good), `{"artifact"`, `{"extra":1,"artifact"`, 1), false},
		{"two documents", string(good) + string(good), false},
		{"schema 2", strings.Replace(string(good), `"schema":1`, `"schema":2`, 1), false},
		{"relative target", strings.Replace(string(good), `"target":"/`, `"target":"`, 1), false},
		{"tag reference", strings.Replace(string(good), "@sha256:", ":v1@x", 1), false},
		{"oversized", string(good) + strings.Repeat(" ", 5000), false},
		{"not JSON", "pointer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePointerFile([]byte(tc.raw))
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("err %v is not invalid input", err)
			}
			if tc.ok && (p.Identity != testIdentity || p.Target != "/models/llama") {
				t.Fatalf("pointer %+v", p)
			}
		})
	}
}

// FuzzParsePointerFile: whatever the bytes of a pointer file (image
// content), an accepted pointer is one ParsePointerLabels accepts.
func FuzzParsePointerFile(f *testing.F) {
	good, _ := PointerFile(testPointer())
	f.Add(good)
	f.Add([]byte(`{"artifact":"h/r@sha256:` + zeros + `","identity":"sha256:` + zeros + `","schema":1,"target":"/a/../b"}`))
	f.Add([]byte(`{"schema":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParsePointerFile(raw)
		if err != nil {
			return
		}
		if q, _, err := ParsePointerLabels(PointerLabels(p)); err != nil || q.Identity != p.Identity || q.Target != p.Target {
			t.Fatalf("accepted %+v, which its labels refuse: %v", p, err)
		}
	})
}
