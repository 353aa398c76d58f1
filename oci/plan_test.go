package oci

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// orasManifest is what `oras push ref file...` writes for a source directory:
// one application/vnd.oci.image.layer.v1.tar layer per file, titled.
func orasManifest(src *artifact.SourceDir) *ocispec.Manifest {
	m := &ocispec.Manifest{Versioned: manifestV2(), MediaType: ocispec.MediaTypeImageManifest, ArtifactType: "application/vnd.unknown.artifact.v1",
		Config:      ocispec.DescriptorEmptyJSON,
		Annotations: map[string]string{ocispec.AnnotationCreated: "2026-01-01T00:00:00Z"}}
	for i := len(src.Files) - 1; i >= 0; i-- { // any order
		f := src.Files[i]
		m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer,
			Digest: digest.NewDigestFromEncoded(digest.SHA256, f.SHA256), Size: f.Size,
			Annotations: map[string]string{ocispec.AnnotationTitle: f.Path}})
	}
	return m
}

// TestPlanForeignMatchesImport: importing an oras-pushed directory gives the
// identity `weightsnap import` gives the same directory, before any fetch.
func TestPlanForeignMatchesImport(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 3)
	o := ImportOptions{Repository: "org/model", Revision: storetest.Revision}
	plan, err := PlanForeign("reg/x:1", orasManifest(src), o)
	if err != nil {
		t.Fatal(err)
	}
	want := storetest.Identity(src)
	wd, _ := want.ID()
	gd, _ := plan.Identity.ID()
	if wd != gd || plan.Kind != KindForeign || len(plan.Files) != len(src.Files) {
		t.Fatalf("identity %s, want %s (files %d)", gd, wd, len(plan.Files))
	}
	for i := 1; i < len(plan.Files); i++ {
		if plan.Files[i-1].Path >= plan.Files[i].Path {
			t.Fatal("plan files are not sorted")
		}
	}
	// ModelPack types and filepath annotations import the same way.
	mp := orasManifest(src)
	for i := range mp.Layers {
		p := mp.Layers[i].Annotations[ocispec.AnnotationTitle]
		mp.Layers[i].MediaType = LayerMediaType(p)
		mp.Layers[i].Annotations = map[string]string{AnnotationFilepath: p, AnnotationTitle: "ignored-" + p}
	}
	plan2, err := PlanForeign("reg/x:1", mp, o)
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := plan2.Identity.ID(); d2 != wd {
		t.Fatal("ModelPack layers gave another identity")
	}
	// Without --repository the reference names the model.
	plan3, err := PlanForeign("reg.example:5000/models/x:1", orasManifest(src), ImportOptions{Revision: storetest.Revision})
	if err != nil || plan3.Identity.Model.Repository != "reg.example:5000/models/x" {
		t.Fatalf("default repository: %v, %+v", err, plan3.Identity.Model)
	}
}

func TestPlanForeignRefuses(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 2)
	o := ImportOptions{Revision: storetest.Revision}
	cases := map[string]struct {
		edit  func(m *ocispec.Manifest)
		o     ImportOptions
		class func(error) bool
	}{
		"no revision":  {func(*ocispec.Manifest) {}, ImportOptions{}, errdefs.IsInvalidArgument},
		"bad revision": {func(*ocispec.Manifest) {}, ImportOptions{Revision: "main"}, errdefs.IsInvalidArgument},
		"nested layers": {func(m *ocispec.Manifest) {
			m.Layers[1].Annotations[AnnotationTitle] = m.Layers[0].Annotations[AnnotationTitle] + "/x"
		}, o, errdefs.IsInvalidArgument},
		"root layer":    {func(m *ocispec.Manifest) { m.Layers[0].Annotations[AnnotationTitle] = "./" }, o, errdefs.IsInvalidArgument},
		"escaping path": {func(m *ocispec.Manifest) { m.Layers[0].Annotations[AnnotationTitle] = "../x.safetensors" }, o, errdefs.IsInvalidArgument},
		"absolute path": {func(m *ocispec.Manifest) { m.Layers[0].Annotations[AnnotationTitle] = "/etc/x" }, o, errdefs.IsInvalidArgument},
		"duplicate": {func(m *ocispec.Manifest) {
			m.Layers[1].Annotations[AnnotationTitle] = m.Layers[0].Annotations[AnnotationTitle]
		}, o, errdefs.IsInvalidArgument},
		"no safetensors": {func(m *ocispec.Manifest) {
			var keep []ocispec.Descriptor
			for _, l := range m.Layers {
				if !strings.HasSuffix(l.Annotations[AnnotationTitle], ".safetensors") {
					keep = append(keep, l)
				}
			}
			m.Layers = keep
		}, o, errdefs.IsNotImplemented},
		"sha512 layer": {func(m *ocispec.Manifest) {
			m.Layers[0].Digest = digest.SHA512.FromString("x")
		}, o, errdefs.IsNotImplemented},
	}
	for name, c := range cases {
		m := orasManifest(src)
		c.edit(m)
		_, err := PlanForeign("reg/x:1", m, c.o)
		if err == nil || !c.class(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Untitled layers are skipped, as oras pull skips them.
	m := orasManifest(src)
	m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("x"), Size: 1})
	if _, err := PlanForeign("reg/x:1", m, o); err != nil {
		t.Fatal(err)
	}
}

// TestPlanWeightsnap: the pushed form plans back to the same identity and
// files; any disagreement between annotations, index and layers is a typed
// data-loss error.
func TestPlanWeightsnap(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 2)
	_, l := imported(t, src)
	a, err := NewArtifact(l.Identity(), l.Index, nil)
	if err != nil {
		t.Fatal(err)
	}
	decode := func() *ocispec.Manifest {
		m, err := DecodeManifest("r", a.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := decode()
	if _, ok := IndexLayer(m); !ok {
		t.Fatal("no index layer")
	}
	plan, err := PlanWeightsnap("r", m, a.Index)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := plan.Identity.ID(); d != a.ID || len(plan.Files) != len(l.Index.Files) || plan.TotalBytes() != l.Index.TotalBytes() {
		t.Fatalf("plan %+v", plan)
	}
	for name, edit := range map[string]func(m *ocispec.Manifest, x *artifact.Index){
		"identity digest": func(m *ocispec.Manifest, _ *artifact.Index) {
			m.Annotations[AnnotationIdentityDigest] = "sha256:" + strings.Repeat("0", 64)
		},
		"index identity": func(_ *ocispec.Manifest, x *artifact.Index) {
			x.ID = artifact.MustParseID("sha256:" + strings.Repeat("0", 64))
		},
		"layer digest": func(m *ocispec.Manifest, _ *artifact.Index) {
			m.Layers[0].Digest = digest.FromString("other")
		},
		"layer size":   func(m *ocispec.Manifest, _ *artifact.Index) { m.Layers[0].Size++ },
		"missing file": func(m *ocispec.Manifest, _ *artifact.Index) { m.Layers = m.Layers[1:] },
	} {
		m := decode()
		x, _ := artifact.DecodeIndex(a.Index)
		edit(m, x)
		raw, _ := json.Marshal(x)
		_, err := PlanWeightsnap("r", m, raw)
		if !errdefs.IsDataLoss(err) || !strings.Contains(err.Error(), "index layer disagrees") {
			t.Errorf("%s: %v", name, err)
		}
	}
	m = decode()
	m.Annotations[AnnotationIdentity] = `{"schema":1}`
	if _, err := PlanWeightsnap("r", m, a.Index); err == nil {
		t.Fatal("an invalid identity annotation was accepted")
	}
}
