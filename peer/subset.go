package peer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/weightsnap/weightsnap/artifact"
)

// The producer a tensor subset's identity names.
const (
	SubsetProducerName = "tensor-subset"
	subsetVersion      = "1"
	subsetImpl         = "weightsnap tensor-subset v1: the tensors whose names match any pattern (path.Match), in source order; " +
		"each safetensors file holding one re-encoded with only those tensors and no __metadata__; every other file as it is"
)

// subsetPlan is a fetch of the tensors matching patterns: each safetensors
// shard with a match becomes a file of its own with only those tensors.
type subsetPlan struct {
	files []subsetFile
}

// subsetFile is one file of a subset.
type subsetFile struct {
	shard   int
	header  []byte               // the new file's header region; nil: the shard as it is
	tensors []WeightTensorRecord // the source records of the matched tensors
}

// SubsetIdentity is the identity of the tensors of parent matching
// patterns: the parent's, made by the tensor-subset producer, whose
// fingerprint names the implementation, the parent and the patterns.
func SubsetIdentity(parent artifact.Identity, patterns []string) (artifact.Identity, error) {
	digest, err := parent.Digest()
	if err != nil {
		return artifact.Identity{}, err
	}
	ps := slices.Clone(patterns)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	sum := sha256.Sum256([]byte(subsetImpl + "\nparent " + digest + "\ntensors " + strings.Join(ps, "\n")))
	id := parent
	id.Producer = artifact.ProducerRef{Name: SubsetProducerName, Version: subsetVersion,
		Fingerprint: "sha256:" + hex.EncodeToString(sum[:]), ManifestSchema: parent.Producer.ManifestSchema,
		RestorerSchema: parent.Producer.RestorerSchema}
	return id, id.Validate()
}

// planSubset plans the subset of m matching patterns and returns its identity.
func planSubset(m *WeightManifest, patterns []string) (*subsetPlan, artifact.Identity, error) {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return nil, artifact.Identity{}, badInput("tensor pattern %q is not a path.Match pattern", p)
		}
	}
	match := func(name string) bool {
		for _, p := range patterns {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}
	plan := &subsetPlan{}
	matched := 0
	for i, s := range m.Shards {
		if !artifact.IsSafetensors(s.Name) {
			plan.files = append(plan.files, subsetFile{shard: i})
			continue
		}
		sf := subsetFile{shard: i}
		var infos []artifact.TensorInfo
		var at int64
		for _, t := range s.Tensors {
			if match(t.Name) {
				sf.tensors = append(sf.tensors, t)
				infos = append(infos, artifact.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: at, End: at + t.Length})
				at += t.Length
			}
		}
		if len(sf.tensors) == 0 {
			continue
		}
		hdr, err := artifact.EncodeHeader(infos, nil)
		if err != nil {
			return nil, artifact.Identity{}, fmt.Errorf("subset of %s: %w", s.Name, err)
		}
		sf.header = hdr
		matched += len(sf.tensors)
		plan.files = append(plan.files, sf)
	}
	if matched == 0 {
		return nil, artifact.Identity{}, badInput("no tensor of %s matches %q", short(m.IdentityDigest), patterns)
	}
	id, err := SubsetIdentity(m.Identity, patterns)
	return plan, id, err
}

// prepare creates the subset's files, writes each new header, and lists
// the units: matched tensors at their new offsets, other files whole.
func (p *subsetPlan) prepare(f *fetcher, w artifact.Writer) error {
	for _, sf := range p.files {
		s := f.base.Shards[sf.shard]
		if sf.header == nil {
			t := &target{path: s.Name, want: s.entry()}
			if err := f.create(w, t); err != nil {
				return err
			}
			f.addUnits(t, shardUnits(sf.shard, s, t))
			continue
		}
		start := int64(len(sf.header))
		t := &target{path: s.Name, subset: true, want: artifact.FileEntry{Path: s.Name, DataStart: start,
			HeaderBLAKE3: artifact.BLAKE3Hex(sf.header)}}
		var us []*unit
		at := start
		for _, x := range sf.tensors {
			t.want.Tensors = append(t.want.Tensors, artifact.TensorEntry{Name: x.Name, DType: x.DType, Shape: x.Shape,
				Offset: at, Length: x.Length, BLAKE3: x.BLAKE3})
			us = append(us, &unit{shard: sf.shard, off: x.Offset, n: x.Length, dst: t, dstOff: at, name: x.Name, blake3: x.BLAKE3})
			at += x.Length
		}
		t.want.Size = at
		if err := f.create(w, t); err != nil {
			return err
		}
		if _, err := t.fw.WriteAt(sf.header, 0); err != nil {
			return err
		}
		f.addUnits(t, us)
	}
	return nil
}
