package oci

import (
	"context"
	"encoding/json"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/pointer"
)

// MediaTypeModelConfigLegacy is the vnd.cnai media type of a ModelPack config, which a pull accepts
// too.
const MediaTypeModelConfigLegacy = "application/vnd.cnai.model.config.v1+json"

// maxModelConfigBytes bounds the ModelPack config read for its revision.
const maxModelConfigBytes = 1 << 20

// IsArtifact says whether a manifest is an artifact, which containerd's CRI cannot pull as an
// image. An artifact's config is ModelPack's, under either media type. Or it has an artifactType
// and the empty config, as a plain oras push writes.
func IsArtifact(m *ocispec.Manifest) bool {
	switch m.Config.MediaType {
	case MediaTypeModelConfig, MediaTypeModelConfigLegacy:
		return true
	case ocispec.MediaTypeEmptyJSON:
		return m.ArtifactType != ""
	}
	return false
}

// FetchArtifact resolves r's reference and says whether its manifest is an artifact (IsArtifact).
// An image index resolves to the manifest of the host's platform.
func FetchArtifact(ctx context.Context, r *registry.Remote) (*Resolved, bool, error) {
	res, err := resolveManifest(ctx, r, "")
	if err != nil {
		return nil, false, err
	}
	return res, IsArtifact(res.Manifest), nil
}

// PlanArtifact plans the pull of a fetched artifact, whichever tool pushed it. A weightsnap
// artifact is planned by its index layer. Any other is planned by PlanForeign with ArtifactImport's
// identity fields. Such are ModelPack artifacts that modctl or oras wrote, and plain oras pushes.
// So every node that pulls one manifest plans one identity.
func PlanArtifact(ctx context.Context, r *registry.Remote, res *Resolved) (*Plan, error) {
	if _, ok := IndexLayer(res.Manifest); ok {
		return planRemote(ctx, r, res.Manifest, ImportOptions{})
	}
	o, err := ArtifactImport(ctx, r, res)
	if err != nil {
		return nil, err
	}
	return PlanForeign(r.String(), res.Manifest, o)
}

// ArtifactImport is the identity fields of a foreign artifact pulled by reference. Its repository
// is the reference's, PlanForeign's default. Its revision is the ModelPack config's
// descriptor.revision when that is immutable: a commit or a digest. Otherwise its revision is the
// manifest digest, which is exact and content-addressed.
func ArtifactImport(ctx context.Context, r *registry.Remote, res *Resolved) (ImportOptions, error) {
	o := ImportOptions{Revision: res.Desc.Digest.String()}
	switch res.Manifest.Config.MediaType {
	case MediaTypeModelConfig, MediaTypeModelConfigLegacy:
		raw, err := r.FetchSmall(ctx, res.Manifest.Config, "config of "+r.String(), maxModelConfigBytes)
		if err != nil {
			return ImportOptions{}, err
		}
		var cfg struct {
			Descriptor struct {
				Revision string `json:"revision"`
			} `json:"descriptor"`
		}
		if json.Unmarshal(raw, &cfg) == nil && artifact.IsImmutableRevision(cfg.Descriptor.Revision) {
			o.Revision = cfg.Descriptor.Revision
		}
	}
	return o, nil
}

// ArtifactTarget is the directory where WeightsOnlyImage puts a pulled artifact's files. A
// pointer's target is never the root directory. So an image volume of an artifact shows its files
// under model/. A volume's subPath "model" mounts them at its root.
const ArtifactTarget = "/model"

// WeightsOnlyImage is the local image the CRI image service answers a pull of an artifact with. It
// has the scratch config of the host's platform and one pointer layer, p at its target.
func WeightsOnlyImage(p pointer.Pointer) (*Image, *PointerLayer, error) {
	base, err := scratchBase("")
	if err != nil {
		return nil, nil, err
	}
	pl, err := NewPointerLayer(p)
	if err != nil {
		return nil, nil, err
	}
	img, err := ComposeImage(base.config, nil, []*PointerLayer{pl}, nil)
	if err != nil {
		return nil, nil, err
	}
	return img, pl, nil
}
