package oci

import (
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestIsArtifact: ModelPack configs (current and vnd.cnai) and an
// artifactType with the empty config are artifacts; image configs, and the
// empty config with no artifactType, are not.
func TestIsArtifact(t *testing.T) {
	for _, tc := range []struct {
		config, artifactType string
		want                 bool
	}{
		{MediaTypeModelConfig, ArtifactTypeModel, true},
		{MediaTypeModelConfig, "", true},
		{MediaTypeModelConfigLegacy, "", true},
		{ocispec.MediaTypeEmptyJSON, "application/vnd.example.weights", true},
		{ocispec.MediaTypeEmptyJSON, "", false},
		{ocispec.MediaTypeImageConfig, "", false},
		{dockerConfig, "", false},
		{ocispec.MediaTypeImageConfig, "application/vnd.example.weights", false},
	} {
		m := &ocispec.Manifest{Config: ocispec.Descriptor{MediaType: tc.config}, ArtifactType: tc.artifactType}
		if got := IsArtifact(m); got != tc.want {
			t.Errorf("IsArtifact(config %s, artifactType %q) = %v, want %v", tc.config, tc.artifactType, got, tc.want)
		}
	}
}
