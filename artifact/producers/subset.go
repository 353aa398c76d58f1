package producers

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/weightsnap/weightsnap/artifact"
)

// TensorSubsetName is the tensor-subset producer's name.
const TensorSubsetName = "tensor-subset"

const (
	tensorSubsetVersion = "2"
	tensorSubsetImpl    = "weightsnap tensor-subset v2: the tensors whose names match any pattern (path.Match), in source order; " +
		"each safetensors file holding one re-encoded with only those tensors and its __metadata__; every other file as it is"
)

// SubsetIdentity is the identity of the tensors of parent matching
// patterns: the parent's, made by the tensor-subset producer, whose
// fingerprint names the implementation, the parent and the patterns.
func SubsetIdentity(parent artifact.Identity, patterns []string) (artifact.Identity, error) {
	digest, err := parent.ID()
	if err != nil {
		return artifact.Identity{}, err
	}
	ps := slices.Clone(patterns)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	sum := sha256.Sum256([]byte(tensorSubsetImpl + "\nparent " + digest.String() + "\ntensors " + strings.Join(ps, "\n")))
	id := parent
	id.Producer = artifact.ProducerRef{Name: TensorSubsetName, Version: tensorSubsetVersion,
		Fingerprint: "sha256:" + hex.EncodeToString(sum[:]), ManifestSchema: parent.Producer.ManifestSchema,
		RestorerSchema: parent.Producer.RestorerSchema}
	return id, id.Validate()
}
