package oci

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/trust"
)

// Carrier is a producer that brings signature records with the artifact it fetches. A weight peer
// is one: it brings the records the sending node's store kept. CarriedRecords returns them with
// the identity and the files whose bytes the fetch verifies. A record binds the files by their
// sha256, which the carrier takes from the sender. Once a record is kept, CheckSHA256 has the fetch
// compute each file's sha256 from its bytes. The fetch then refuses a file whose sha256 differs.
type Carrier interface {
	CarriedRecords() (records []byte, identity artifact.Identity, files []artifact.File)
	CheckSHA256()
}

// CheckBinding checks that a record's signatures cover the OCI manifest of identity with exactly
// files. A weightsnap artifact's manifest names the identity in its annotations. It names each file
// as a layer of the file's path and sha256. A foreign artifact's identity must be the one its
// manifest plans, with the same files. Its revision is then the manifest digest or a ModelPack
// config's immutable revision. A manifest does not name a tar layer's files, so such an artifact is
// not bound. Its signatures are checked at the registry instead. Errors are plain: the caller
// refuses with them.
//
// An OMS record binds by its statement. The statement must name exactly the files received, by
// sha256, save its ignore_paths. A statement over BLAKE3 digests cannot be bound before the bytes
// arrive, so it is refused.
func CheckBinding(rec trust.Record, identity artifact.Identity, files []artifact.File) error {
	if rec.Kind == trust.KindOMS {
		o, err := trust.ParseOMS(rec.Signatures[0].Raw)
		if err != nil {
			return err
		}
		if h := o.Statement.Predicate.Serialization.HashType; h != "sha256" {
			return fmt.Errorf("the model.sig names %s digests, which a peer's files are not bound by before they arrive (sign with sha256)", h)
		}
		return o.CheckFiles(receivedIndex(files))
	}
	m, err := DecodeManifest(rec.Ref, rec.Manifest)
	if err != nil {
		return err
	}
	want, err := identity.ID()
	if err != nil {
		return err
	}
	var layers []artifact.File
	if _, ok := IndexLayer(m); ok {
		got, ok := annotatedIdentity(m)
		if d, _ := got.ID(); !ok || d != want {
			return fmt.Errorf("the signed manifest %s does not name identity %s", rec.Digest(), want.Short())
		}
		for _, l := range m.Layers {
			if !metaLayer(l) {
				layers = append(layers, layerFile(LayerPath(l), l.Digest, l.Size))
			}
		}
	} else {
		rev := identity.Model.Revision
		modelPack := m.Config.MediaType == MediaTypeModelConfig || m.Config.MediaType == MediaTypeModelConfigLegacy
		if rev != rec.Digest().String() && !(modelPack && artifact.IsImmutableRevision(rev)) {
			return fmt.Errorf("identity %s names revision %q, not the signed manifest %s", want.Short(), rev, rec.Digest())
		}
		plan, err := PlanForeign(rec.Ref, m, ImportOptions{Revision: rev})
		if err != nil {
			return err
		}
		if len(plan.Archives) > 0 {
			return fmt.Errorf("the signed manifest %s has tar layers, whose files it does not name", rec.Digest())
		}
		if d, err := plan.Identity.ID(); err != nil || d != want {
			return fmt.Errorf("the signed manifest %s plans another identity than %s", rec.Digest(), want.Short())
		}
		for _, f := range plan.Files {
			layers = append(layers, layerFile(f.Path, f.Layer.Digest, f.Size))
		}
	}
	got := make([]artifact.File, len(files))
	for i, f := range files {
		got[i] = artifact.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256}
	}
	byPath := func(a, b artifact.File) int { return strings.Compare(a.Path, b.Path) }
	slices.SortFunc(layers, byPath)
	slices.SortFunc(got, byPath)
	if !slices.Equal(layers, got) {
		return fmt.Errorf("the signed manifest %s names other files than the %d received (paths, sizes, sha256)", rec.Digest(), len(files))
	}
	return nil
}

// layerFile is a layer as the file it holds: path, size and sha256 hex
// (a digest of another algorithm never equals a received file's).
func layerFile(path string, d digest.Digest, size int64) artifact.File {
	sum := ""
	if d.Algorithm() == digest.SHA256 {
		sum = d.Encoded()
	}
	return artifact.File{Path: path, Size: size, SHA256: sum}
}

// receivedIndex is the index of what a fetch receives, as far as its
// files name it: each path, size and sha256.
func receivedIndex(files []artifact.File) *artifact.Index {
	idx := &artifact.Index{Schema: artifact.IndexSchema}
	for _, f := range files {
		idx.Files = append(idx.Files, artifact.FileEntry{File: artifact.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256}})
	}
	return idx
}
