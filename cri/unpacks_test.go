package cri

import (
	"slices"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/pointer"
)

func TestUnpackedBy(t *testing.T) {
	got := unpackedBy(map[string]string{
		"containerd.io/gc.ref.snapshot.overlayfs":  "sha256:1",
		"containerd.io/gc.ref.snapshot.weightsnap": "sha256:2",
		"containerd.io/gc.ref.content.l.0":         "sha256:3",
		"containerd.io/gc.ref.snapshot.":           "sha256:4",
	})
	slices.Sort(got)
	if !slices.Equal(got, []string{"overlayfs", "weightsnap"}) {
		t.Fatalf("unpackedBy = %v", got)
	}
	layers := []ocispec.Descriptor{{}, {Annotations: map[string]string{pointer.LabelIdentity: "x"}}}
	if !hasWeightLayer(layers) || hasWeightLayer(layers[:1]) {
		t.Fatal("hasWeightLayer")
	}
}
