// Package oci is the OCI form of weight artifacts and weight images in a registry. It pushes and
// pulls the ModelPack manifest weightsnap writes, and plans each pull into the store. It imports
// safetensors artifacts that other tools pushed. It builds weight images, whose pointer layers name
// artifacts for the snapshotter. The registry client is package oci/registry; the pointer's labels
// and file are package pointer.
package oci

import (
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
)

// Media types of the artifact form (CNCF ModelPack) and of weightsnap's own layers.
const (
	// ArtifactTypeModel is the manifest artifactType of a ModelPack artifact.
	ArtifactTypeModel = "application/vnd.cncf.model.manifest.v1+json"
	// MediaTypeModelConfig is the ModelPack config blob.
	MediaTypeModelConfig = "application/vnd.cncf.model.config.v1+json"
	// MediaTypeWeightRaw is one uncompressed weight file (*.safetensors).
	MediaTypeWeightRaw = "application/vnd.cncf.model.weight.v1.raw"
	// MediaTypeWeightConfigRaw is one uncompressed config, tokenizer or other file.
	MediaTypeWeightConfigRaw = "application/vnd.cncf.model.weight.config.v1.raw"
	// MediaTypeIndex is weightsnap's index layer: the store's index.json bytes.
	MediaTypeIndex = "application/vnd.weightsnap.index.v1+json"
	// MediaTypePieces is weightsnap's pieces layer: the chaining values of the pieces of every
	// unit longer than a piece (pieces.go).
	MediaTypePieces = "application/vnd.weightsnap.pieces.v1"
	// MediaTypePointerLayer is the media type of a weight image's pointer layer.
	MediaTypePointerLayer = ocispec.MediaTypeImageLayer
)

// Annotations of an artifact's manifest and layers.
const (
	// AnnotationTitle is the file name oras and CRI-O read.
	AnnotationTitle = ocispec.AnnotationTitle
	// AnnotationFilepath is ModelPack's relative file path of a layer.
	AnnotationFilepath = "org.cncf.model.filepath"
	// AnnotationFilepathLegacy is AnnotationFilepath's org.cnai name, which a pull reads too.
	AnnotationFilepathLegacy = "org.cnai.model.filepath"
	// AnnotationIdentityDigest is the artifact's identity digest, sha256:<hex>.
	AnnotationIdentityDigest = "org.weightsnap.identity.digest"
	// AnnotationIdentity is the artifact's canonical identity JSON.
	AnnotationIdentity = "org.weightsnap.identity"
	// annotationOrasUnpack marks a layer that oras pushed as a tarred directory.
	annotationOrasUnpack = "io.deis.oras.content.unpack"
)

// LayerMediaType is the ModelPack layer media type of a payload file. A safetensors file is a
// weight; any other file, such as a config or tokenizer, is a weight config.
func LayerMediaType(path string) string {
	if artifact.IsSafetensors(path) {
		return MediaTypeWeightRaw
	}
	return MediaTypeWeightConfigRaw
}

// LayerPath is the relative file path a layer names, or "" for a layer that names none. It is
// ModelPack's filepath annotation under either name, else the title oras writes.
func LayerPath(desc ocispec.Descriptor) string {
	for _, k := range []string{AnnotationFilepath, AnnotationFilepathLegacy, AnnotationTitle} {
		if p := desc.Annotations[k]; p != "" {
			return p
		}
	}
	return ""
}

// LayerKind classifies a layer of an artifact that weightsnap did not write.
type LayerKind int

// Layer kinds.
const (
	// LayerSkip is a layer that names no file; oras pull skips it too.
	LayerSkip LayerKind = iota
	// LayerFile is one raw file whose layer digest is the file's sha256.
	LayerFile
	// LayerArchive is a tar layer, compressed or not, or a tarred directory. Its files are
	// extracted (PlanArchive).
	LayerArchive
)

// ClassifyLayer says whether a layer holds one raw file, an archive, or no file. oras labels a
// plain file application/vnd.oci.image.layer.v1.tar, though it is no tar. So an uncompressed type
// with a file name is taken as one raw file. ModelPack's .tar types, compressed types and oras's
// tarred directories are archives.
func ClassifyLayer(desc ocispec.Descriptor) LayerKind {
	if LayerPath(desc) == "" {
		return LayerSkip
	}
	mt := desc.MediaType
	switch {
	case desc.Annotations[annotationOrasUnpack] == "true",
		strings.HasSuffix(mt, "+gzip"), strings.HasSuffix(mt, "+zstd"), strings.HasSuffix(mt, ".gzip"),
		strings.HasSuffix(mt, ".zstd"),
		strings.HasPrefix(mt, "application/vnd.cncf.model.") && strings.HasSuffix(mt, ".tar"),
		strings.HasPrefix(mt, "application/vnd.cnai.model.") && strings.HasSuffix(mt, ".tar"),
		mt == "application/vnd.docker.image.rootfs.diff.tar.gzip":
		return LayerArchive
	case mt == MediaTypeIndex, mt == MediaTypePieces:
		return LayerSkip
	}
	return LayerFile
}
