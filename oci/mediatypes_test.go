package oci

import (
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestLayerMediaType(t *testing.T) {
	for path, want := range map[string]string{
		"model-00001-of-00002.safetensors": MediaTypeWeightRaw,
		"sub/model.safetensors":            MediaTypeWeightRaw,
		"config.json":                      MediaTypeWeightConfigRaw,
		"tokenizer.json":                   MediaTypeWeightConfigRaw,
		"model.safetensors.index.json":     MediaTypeWeightConfigRaw,
	} {
		if got := LayerMediaType(path); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
}

func TestClassifyLayer(t *testing.T) {
	titled := func(mt string, extra ...string) ocispec.Descriptor {
		a := map[string]string{AnnotationTitle: "model.safetensors"}
		for i := 0; i+1 < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return ocispec.Descriptor{MediaType: mt, Annotations: a}
	}
	for _, c := range []struct {
		name string
		desc ocispec.Descriptor
		want LayerKind
	}{
		{"oras default", titled(ocispec.MediaTypeImageLayer), LayerFile},
		{"modelpack raw weight", titled(MediaTypeWeightRaw), LayerFile},
		{"modelpack raw config", titled(MediaTypeWeightConfigRaw), LayerFile},
		{"octet-stream", titled("application/octet-stream"), LayerFile},
		{"custom oras type", titled("application/vnd.example.weights"), LayerFile},
		{"modelpack tar", titled("application/vnd.cncf.model.weight.v1.tar"), LayerArchive},
		{"modelpack tar+zstd", titled("application/vnd.cncf.model.weight.v1.tar+zstd"), LayerArchive},
		{"legacy cnai tar", titled("application/vnd.cnai.model.weight.v1.tar"), LayerArchive},
		{"gzip layer", titled(ocispec.MediaTypeImageLayerGzip), LayerArchive},
		{"oras directory", titled(ocispec.MediaTypeImageLayer, annotationOrasUnpack, "true"), LayerArchive},
		{"untitled image layer", ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip}, LayerSkip},
		{"index layer", ocispec.Descriptor{MediaType: MediaTypeIndex}, LayerSkip},
	} {
		if got := ClassifyLayer(c.desc); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// ModelPack's filepath wins over the title; the legacy name is read too.
	d := ocispec.Descriptor{Annotations: map[string]string{AnnotationTitle: "a.safetensors", AnnotationFilepath: "dir/a.safetensors"}}
	if LayerPath(d) != "dir/a.safetensors" {
		t.Fatal(LayerPath(d))
	}
	d = ocispec.Descriptor{Annotations: map[string]string{AnnotationFilepathLegacy: "b.safetensors"}}
	if LayerPath(d) != "b.safetensors" {
		t.Fatal(LayerPath(d))
	}
}
