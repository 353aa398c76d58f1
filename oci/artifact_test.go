package oci

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestManifestDeterministic: the same artifact from two store roots gives
// byte-identical manifests; any identity change gives another digest.
func TestManifestDeterministic(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	_, l1 := imported(t, src)
	_, l2 := imported(t, src)
	a1, err := NewArtifact(l1.Identity(), l1.Index, nil)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := NewArtifact(l2.Identity(), l2.Index, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a1.ManifestDesc.Digest != a2.ManifestDesc.Digest || string(a1.Manifest) != string(a2.Manifest) {
		t.Fatalf("two store roots gave manifests %s and %s", a1.ManifestDesc.Digest, a2.ManifestDesc.Digest)
	}
	if digest.FromBytes(a1.Manifest) != a1.ManifestDesc.Digest {
		t.Fatal("manifest descriptor does not describe the bytes")
	}

	other := l1.Identity()
	other.Component = "language_model"
	x := *l1.Index
	otherID, _ := other.ID()
	x.ID = otherID
	a3, err := NewArtifact(other, &x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a3.ManifestDesc.Digest == a1.ManifestDesc.Digest {
		t.Fatal("a different identity gave the same manifest digest")
	}
	if _, err := NewArtifact(other, l1.Index, nil); err == nil {
		t.Fatal("an index of another identity was accepted")
	}
}

// TestManifestShape checks the ModelPack form: artifactType, config, one raw
// layer per file with title and filepath, the index layer last, annotations.
func TestManifestShape(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 2)
	_, l := imported(t, src)
	a, err := NewArtifact(l.Identity(), l.Index, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(a.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != ArtifactTypeModel || m.MediaType != ocispec.MediaTypeImageManifest || m.Config.MediaType != MediaTypeModelConfig {
		t.Fatalf("manifest types: %q %q %q", m.MediaType, m.ArtifactType, m.Config.MediaType)
	}
	if len(m.Layers) != len(l.Index.Files)+1 || m.Layers[len(m.Layers)-1].MediaType != MediaTypeIndex {
		t.Fatalf("want %d file layers and the index layer last, got %d layers", len(l.Index.Files), len(m.Layers))
	}
	for i, f := range l.Index.Files {
		ly := m.Layers[i]
		if ly.Digest.String() != "sha256:"+f.SHA256 || ly.Size != f.Size || ly.Annotations[AnnotationTitle] != f.Path || ly.Annotations[AnnotationFilepath] != f.Path {
			t.Fatalf("layer %d does not describe %s: %+v", i, f.Path, ly)
		}
		if want := LayerMediaType(f.Path); ly.MediaType != want {
			t.Fatalf("%s: media type %s, want %s", f.Path, ly.MediaType, want)
		}
	}
	idDigest, _ := l.Identity().ID()
	canon, _ := l.Identity().CanonicalJSON()
	if m.Annotations[AnnotationIdentityDigest] != idDigest.String() || m.Annotations[AnnotationIdentity] != string(canon) {
		t.Fatalf("identity annotations: %v", m.Annotations)
	}
	if strings.Contains(string(a.Manifest), "created") {
		t.Fatal("manifest carries a timestamp")
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(a.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"descriptor", "config", "modelfs"} {
		if _, ok := cfg[k]; !ok {
			t.Fatalf("config lacks required %q: %s", k, a.Config)
		}
	}
	if len(cfg) != 3 {
		t.Fatalf("config has properties beyond ModelPack's: %s", a.Config)
	}
	var fs modelFS
	json.Unmarshal(cfg["modelfs"], &fs)
	if fs.Type != "layers" || len(fs.DiffIDs) != len(m.Layers) || fs.DiffIDs[0] != m.Layers[0].Digest {
		t.Fatalf("modelfs %+v does not list the layers", fs)
	}
	// The index layer is the store's own index.json encoding.
	x, err := artifact.DecodeIndex(a.Index)
	if err != nil || x.ID != idDigest {
		t.Fatalf("index layer: %v", err)
	}
}
