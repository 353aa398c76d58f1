package oci

import (
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
)

// Artifact is the OCI form of one store artifact: its manifest, config, index layer, pieces layer
// and payload layers. It holds the bytes of the small blobs and the descriptors of the payload
// layers. A payload layer's bytes are a payload file of the store. It depends only on the
// identity, the index and the pieces layer, which the payload's bytes give. So one artifact has one
// manifest digest on every host and under every store root.
type Artifact struct {
	Identity     artifact.Identity
	ID           artifact.ID
	Layers       []ocispec.Descriptor // one per payload file, in index order (sorted by path)
	Index        []byte               // the index layer: the store's index.json encoding
	IndexDesc    ocispec.Descriptor
	Pieces       []byte // the pieces layer (pieces.go); nil for none
	PiecesDesc   ocispec.Descriptor
	Config       []byte
	ConfigDesc   ocispec.Descriptor
	Manifest     []byte
	ManifestDesc ocispec.Descriptor
}

// modelConfig is the ModelPack config (application/vnd.cncf.model.config.v1+json).
// Its objects allow no additional properties, so weightsnap's identity lives
// in the manifest annotations and the index layer, never here.
type modelConfig struct {
	Descriptor modelDescriptor `json:"descriptor"`
	Config     modelParams     `json:"config"`
	ModelFS    modelFS         `json:"modelfs"`
}

type modelDescriptor struct {
	Name     string `json:"name,omitempty"`
	Revision string `json:"revision,omitempty"`
}

type modelParams struct {
	Format       string `json:"format,omitempty"`
	Precision    string `json:"precision,omitempty"`
	Quantization string `json:"quantization,omitempty"`
}

type modelFS struct {
	Type    string          `json:"type"`
	DiffIDs []digest.Digest `json:"diffIds"`
}

// NewArtifact builds the OCI form of the artifact with identity id, index x and pieces layer
// pieces (hashPieces), which is nil for an artifact without one.
func NewArtifact(id artifact.Identity, x *artifact.Index, pieces []byte) (*Artifact, error) {
	canon, err := id.CanonicalJSON()
	if err != nil {
		return nil, err
	}
	idDigest, err := id.ID()
	if err != nil {
		return nil, err
	}
	if x.ID != idDigest {
		return nil, fmt.Errorf("index names identity %s, the artifact is %s", x.ID, idDigest)
	}
	if len(x.Files) == 0 {
		return nil, fmt.Errorf("artifact %s has no payload files", idDigest)
	}
	a := &Artifact{Identity: id, ID: idDigest}
	allSafetensors := true
	for _, f := range x.Files {
		d, err := sha256Digest(f.SHA256)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", f.Path, err)
		}
		a.Layers = append(a.Layers, ocispec.Descriptor{
			MediaType: LayerMediaType(f.Path),
			Digest:    d,
			Size:      f.Size,
			Annotations: map[string]string{
				AnnotationTitle:    f.Path,
				AnnotationFilepath: f.Path,
			},
		})
		if !artifact.IsSafetensors(f.Path) && isWeightLike(f.Path) {
			allSafetensors = false
		}
	}
	if a.Index, err = x.Encode(); err != nil {
		return nil, err
	}
	a.IndexDesc = descriptorOf(MediaTypeIndex, a.Index)
	meta := []ocispec.Descriptor{a.IndexDesc}
	if pieces != nil {
		a.Pieces, a.PiecesDesc = pieces, descriptorOf(MediaTypePieces, pieces)
		meta = append(meta, a.PiecesDesc)
	}

	cfg := modelConfig{
		Descriptor: modelDescriptor{Name: id.Model.Repository, Revision: id.Model.Revision},
		ModelFS:    modelFS{Type: "layers"},
	}
	if allSafetensors {
		cfg.Config.Format = "safetensors"
	}
	if dt := id.Representation.DType; dt != "" && dt != "source" {
		cfg.Config.Precision = dt
	}
	cfg.Config.Quantization = id.Representation.Quantization
	for _, l := range a.Layers {
		cfg.ModelFS.DiffIDs = append(cfg.ModelFS.DiffIDs, l.Digest) // raw layers: diff id = digest
	}
	for _, l := range meta {
		cfg.ModelFS.DiffIDs = append(cfg.ModelFS.DiffIDs, l.Digest)
	}
	if a.Config, err = json.Marshal(cfg); err != nil {
		return nil, err
	}
	a.ConfigDesc = descriptorOf(MediaTypeModelConfig, a.Config)

	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactTypeModel,
		Config:       a.ConfigDesc,
		Layers:       append(append([]ocispec.Descriptor(nil), a.Layers...), meta...),
		Annotations: map[string]string{
			AnnotationIdentityDigest: idDigest.String(),
			AnnotationIdentity:       string(canon),
		},
	}
	if a.Manifest, err = json.Marshal(m); err != nil {
		return nil, err
	}
	a.ManifestDesc = descriptorOf(ocispec.MediaTypeImageManifest, a.Manifest)
	a.ManifestDesc.ArtifactType = ArtifactTypeModel
	return a, nil
}

// isWeightLike reports whether a path looks like a weight file in a format
// other than safetensors (then the config does not claim format safetensors).
func isWeightLike(path string) bool {
	for _, ext := range []string{".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".onnx", ".msgpack"} {
		if len(path) > len(ext) && path[len(path)-len(ext):] == ext {
			return true
		}
	}
	return false
}

func descriptorOf(mediaType string, b []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

// sha256Digest turns a hex sha256 into an OCI digest, validating it.
func sha256Digest(hexSum string) (digest.Digest, error) {
	d := digest.NewDigestFromEncoded(digest.SHA256, hexSum)
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("bad sha256 %q: %w", hexSum, err)
	}
	return d, nil
}
