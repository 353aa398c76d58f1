package oci

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
)

// Kind is where a pulled artifact's identity comes from.
type Kind string

// Kinds of artifact a pull handles.
const (
	// KindWeightsnap is an artifact weightsnap pushed. Its identity is in the manifest annotations,
	// its tensor index in the index layer.
	KindWeightsnap Kind = "weightsnap"
	// KindForeign is an artifact of safetensors files that another tool pushed, such as oras or
	// modctl. Its files are in raw or tar layers; its identity is the fingerprint of its layers
	// (PlanForeign).
	KindForeign Kind = "foreign"
)

// Plan is what a pull fetches and the identity it publishes, known before any payload byte moves.
type Plan struct {
	Ref      string
	Kind     Kind
	Identity artifact.Identity
	Index    *artifact.Index // KindWeightsnap: the pulled index layer
	// Pieces is a weightsnap artifact's pieces layer (pieces.go), nil for an artifact pushed
	// without one. Its size is the one its index gives.
	Pieces *ocispec.Descriptor
	Files  []PlanFile // the raw file layers, sorted by path
	// Archives are a foreign artifact's tar layers, sorted by path. Their files are known only once
	// extracted.
	Archives []PlanArchive
}

// PlanFile is one payload file and the layer that holds it.
type PlanFile struct {
	// File is the file's record. Its SHA256 is the layer digest's hex. Its BLAKE3 is the index
	// entry's, and empty for a foreign artifact.
	artifact.File
	Layer ocispec.Descriptor
	// Binding is how the store's writer hashes the file. A weightsnap artifact's file is
	// BindTreeStream with its index entry. The manifest pins the index layer, and the bytes are
	// checked against its tree. A foreign artifact's file is BindNone: every digest is computed,
	// and the sha256 checked against the layer's.
	Binding artifact.Binding
}

// TotalBytes is the bytes a pull fetches: the payload sizes, each tar layer at its layer size.
func (p *Plan) TotalBytes() int64 {
	var n int64
	for _, f := range p.Files {
		n += f.Size
	}
	for _, a := range p.Archives {
		n += a.Layer.Size
	}
	return n
}

// ImportOptions are the identity fields of a foreign artifact, as import's flags give them.
type ImportOptions struct {
	Repository string
	Revision   string
	Component  string
	TPSize     int
	TPRank     int
}

// DecodeManifest parses an image manifest strictly enough to trust its layers.
func DecodeManifest(ref string, raw []byte) (*ocispec.Manifest, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, manifestError(ref, "manifest is not JSON: "+err.Error())
	}
	if m.SchemaVersion != 2 {
		return nil, manifestError(ref, fmt.Sprintf("manifest schemaVersion %d, want 2", m.SchemaVersion))
	}
	switch m.MediaType {
	case ocispec.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json", "":
	default:
		return nil, manifestError(ref, "not an image manifest: "+m.MediaType)
	}
	for i, l := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if err := l.Digest.Validate(); err != nil || l.Size < 0 {
			return nil, manifestError(ref, fmt.Sprintf("descriptor %d: bad digest or size", i))
		}
	}
	return &m, nil
}

// IndexLayer returns the weightsnap index layer of a manifest, if it has one.
func IndexLayer(m *ocispec.Manifest) (ocispec.Descriptor, bool) {
	for _, l := range m.Layers {
		if l.MediaType == MediaTypeIndex {
			return l, true
		}
	}
	return ocispec.Descriptor{}, false
}

// PlanWeightsnap plans the pull of an artifact weightsnap pushed. indexRaw is the index layer's
// bytes, already checked against its digest. A schema-1 index is upgraded (artifact.Index.Upgrade).
// Identity, index and layers must agree; a disagreement is errdefs.ErrDataLoss. A passthrough
// identity whose source fingerprint disagrees with the layers is an identity collision. That is
// errdefs.ErrConflict.
func PlanWeightsnap(ref string, m *ocispec.Manifest, indexRaw []byte) (*Plan, error) {
	idJSON := m.Annotations[AnnotationIdentity]
	if idJSON == "" {
		return nil, manifestError(ref, "index layer without the "+AnnotationIdentity+" annotation")
	}
	id, err := artifact.ParseIdentity([]byte(idJSON))
	if err != nil {
		return nil, invalidManifest(ref, fmt.Errorf("identity annotation: %w", err))
	}
	idDigest, err := id.ID()
	if err != nil {
		return nil, err
	}
	ann := m.Annotations[AnnotationIdentityDigest]
	if want, err := artifact.ParseID(ann); err != nil || want != idDigest {
		return nil, indexMismatch("", "identity digest annotation", ann, idDigest.String())
	}
	x, err := artifact.DecodeIndex(indexRaw)
	if err == nil {
		err = x.Upgrade()
	}
	if err != nil {
		return nil, invalidManifest(ref, err)
	}
	if x.ID != idDigest {
		return nil, indexMismatch("", "identity", x.ID.String(), idDigest.String())
	}
	byPath := map[string]ocispec.Descriptor{}
	var pieces []ocispec.Descriptor
	for _, l := range m.Layers {
		if l.MediaType == MediaTypePieces {
			pieces = append(pieces, l)
		}
		if metaLayer(l) {
			continue
		}
		p := LayerPath(l)
		if p == "" {
			return nil, manifestError(ref, "layer "+l.Digest.String()+" names no file")
		}
		if _, dup := byPath[p]; dup {
			return nil, manifestError(ref, "two layers hold "+p)
		}
		byPath[p] = l
	}
	if len(byPath) != len(x.Files) {
		return nil, indexMismatch("", "file count", fmt.Sprint(len(x.Files)), fmt.Sprint(len(byPath)))
	}
	plan := &Plan{Ref: ref, Kind: KindWeightsnap, Identity: id, Index: x}
	if len(pieces) > 1 {
		return nil, manifestError(ref, "two pieces layers")
	}
	if len(pieces) == 1 {
		// The layer's size, untrusted, must be the one the index gives.
		if want := piecesSize(pieceUnits(x.Files)); pieces[0].Size != want {
			return nil, indexMismatch("", "pieces layer size", fmt.Sprint(want), fmt.Sprint(pieces[0].Size))
		}
		plan.Pieces = &pieces[0]
	}
	for _, f := range x.Files {
		l, ok := byPath[f.Path]
		if !ok {
			return nil, indexMismatch(f.Path, "layer", "a layer for the file", "none")
		}
		if l.Digest.Algorithm() != "sha256" || l.Digest.Encoded() != f.SHA256 {
			return nil, indexMismatch(f.Path, "sha256", f.SHA256, l.Digest.String())
		}
		if l.Size != f.Size {
			return nil, indexMismatch(f.Path, "size", fmt.Sprint(f.Size), fmt.Sprint(l.Size))
		}
		plan.Files = append(plan.Files, PlanFile{File: f.File, Layer: l, Binding: artifact.Binding{Want: f, By: artifact.BindTreeStream}})
	}
	if err := id.CheckPassthrough(x.Files); err != nil {
		return nil, err
	}
	return plan, nil
}

// PlanForeign plans the import of an artifact weightsnap did not write. Each layer that names a
// file, by ModelPack filepath or oras title, is one raw file. Or it is a tar, tar+gzip or tar+zstd
// layer of files at or below that path (PlanArchive). At least one raw layer must be a safetensors
// file, unless tar layers hold them. The pull checks the tar layers' files then. The identity is
// made of the manifest alone. So it is known before any payload byte is fetched, and every node
// that pulls the manifest plans it. It is the passthrough identity of the layers' files with the
// given repository, revision and component. A raw layer's digest is its file's sha256. A tar layer
// is fingerprinted as a source file of its path, layer size and layer digest. An identity with tar
// layers names the unpack producer (unpackRef). The repository defaults to the reference's
// host/repository.
func PlanForeign(ref string, m *ocispec.Manifest, o ImportOptions) (*Plan, error) {
	if o.Revision == "" {
		return nil, manifestError(ref, "not a weightsnap artifact: --revision is required to import it")
	}
	if r, err := registry.ParseReference(ref); err == nil && o.Repository == "" {
		o.Repository = r.Registry + "/" + r.Repository
	}
	plan := &Plan{Ref: ref, Kind: KindForeign}
	seen := map[string]bool{}
	safetensors := 0
	for _, l := range m.Layers {
		kind := ClassifyLayer(l)
		if kind == LayerSkip {
			continue
		}
		p := strings.TrimPrefix(LayerPath(l), "./")
		if err := artifact.ValidateRelPath(p); err != nil || p == "." {
			if err == nil {
				err = fmt.Errorf("path %q is the artifact's root", p)
			}
			return nil, invalidManifest(ref, fmt.Errorf("layer file name %q: %w", p, err))
		}
		if seen[p] {
			return nil, manifestError(ref, "two layers hold "+p)
		}
		seen[p] = true
		if l.Digest.Algorithm() != "sha256" {
			return nil, unsupported(ref, "layer "+p+" has a "+string(l.Digest.Algorithm())+" digest; only sha256 is a file fingerprint")
		}
		if kind == LayerArchive {
			plan.Archives = append(plan.Archives, PlanArchive{Path: p, Layer: l, Compression: archiveCompression(l.MediaType)})
			continue
		}
		if artifact.IsSafetensors(p) {
			safetensors++
		}
		file := artifact.File{Path: p, Size: l.Size, SHA256: l.Digest.Encoded()}
		plan.Files = append(plan.Files, PlanFile{File: file, Layer: l, Binding: artifact.Binding{Want: artifact.FileEntry{File: file}}})
	}
	if safetensors == 0 && len(plan.Archives) == 0 {
		return nil, unsupported(ref, "no layer names a .safetensors file")
	}
	for p := range seen {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if seen[d] {
				return nil, manifestError(ref, "layer "+p+" is inside layer "+d)
			}
		}
	}
	sort.Slice(plan.Files, func(i, j int) bool { return plan.Files[i].Path < plan.Files[j].Path })
	sort.Slice(plan.Archives, func(i, j int) bool { return plan.Archives[i].Path < plan.Archives[j].Path })
	src := &artifact.SourceDir{}
	for _, f := range plan.Files {
		src.Files = append(src.Files, artifact.SourceFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
	}
	for _, a := range plan.Archives {
		src.Files = append(src.Files, artifact.SourceFile{Path: a.Path, Size: a.Layer.Size, SHA256: a.Layer.Digest.Encoded()})
	}
	sort.Slice(src.Files, func(i, j int) bool { return src.Files[i].Path < src.Files[j].Path })
	plan.Identity = artifact.PassthroughIdentity(src, o.Repository, o.Revision, o.Component, o.TPSize, o.TPRank)
	if len(plan.Archives) > 0 {
		plan.Identity.Producer = unpackRef()
	}
	if err := plan.Identity.Validate(); err != nil {
		return nil, err
	}
	return plan, nil
}
