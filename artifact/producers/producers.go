// Package producers holds the built-in local producers of weight artifacts
// and the Locals (producers.Local) that configure them:
//
//   - passthrough: a safetensors checkpoint or Hugging Face snapshot
//     directory, as it is (artifact.Passthrough);
//   - tp-split: each tensor split for tensor-parallel rank r of N by a
//     layout spec (artifact/tpsplit), optionally cast;
//   - cast: F32/F16/BF16 conversion with round-to-nearest-even (artifact/cast);
//   - tensor-subset: the tensors of an artifact matching patterns, each
//     safetensors file re-encoded with only those (SubsetIdentity; a peer
//     fetch writes the bytes).
//
// The POST_LOAD_ONLY producer that publishes what a loaded model holds
// (tensor-map) lives with the loader contracts, in package loader.
//
// Every producer writes only through the store-scoped artifact.Writer it is
// given, declares one final layout (its local producer's Identity), and writes each
// file in order, so the store's writer hashes it while it is written and
// starts its fsync as soon as it is closed, overlapped with the next file.
// The transforming producers stream: they read source tensors with pread
// into a few fixed buffers and never hold a whole shard or tensor in memory.
package producers

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/weightsnap/weightsnap/artifact"
)

// Phase says when a producer may run.
type Phase string

// Phases.
const (
	// PreLoadSafe producers may run during resolution, before a model is
	// loaded (when allow_local_build permits).
	PreLoadSafe Phase = "PRE_LOAD_SAFE"
	// PostLoadOnly producers run only after a load, through post-load
	// publication (when allow_post_load_publish permits).
	PostLoadOnly Phase = "POST_LOAD_ONLY"
)

// Target is the model an identity is derived for.
type Target struct {
	Repository string // informational, part of the identity
	Revision   string // immutable revision
	Component  string // "" means "all"
}

// Local is a configured local producer: it says which identity it makes
// from a fingerprinted source directory (its one final layout) and makes it.
type Local interface {
	// Name is the producer name, as in ProducerRef.Name.
	Name() string
	// Phase says when the producer may run.
	Phase() Phase
	// Ref is the producer's identity fields: name, version, implementation fingerprint.
	Ref() artifact.ProducerRef
	// Identity is the exact identity of what the producer makes from src.
	Identity(src *artifact.SourceDir, t Target) (artifact.Identity, error)
	// Producer returns the producer that makes it.
	Producer(src *artifact.SourceDir) (artifact.Producer, error)
}

// PhasedProducer is a producer that says when it may run.
type PhasedProducer interface {
	artifact.Producer
	Phase() Phase
}

// SourceCounter is implemented by producers that count the source bytes
// they read.
type SourceCounter interface {
	SourceBytesRead() int64
}

// RefOf builds a ProducerRef whose fingerprint is the sha256 of the
// implementation's description; bump the description (and the version) with
// any change of output. Producers outside this package (package loader's
// tensor-map) derive theirs the same way.
func RefOf(name, version, impl string) artifact.ProducerRef {
	sum := sha256.Sum256([]byte(impl))
	return artifact.ProducerRef{Name: name, Version: version,
		Fingerprint: "sha256:" + hex.EncodeToString(sum[:]), ManifestSchema: 1, RestorerSchema: 1}
}

func component(c string) string {
	if c == "" {
		return "all"
	}
	return c
}

func model(src *artifact.SourceDir, t Target) artifact.Model {
	return artifact.Model{Repository: t.Repository, Revision: t.Revision, Source: src.Files}
}

// The built-in local producers.
var (
	_ Local                     = Passthrough{}
	_ Local                     = (*TPSplit)(nil)
	_ SourceCounter             = (*vllmSharded)(nil)
	_ artifact.ProgressReporter = (*vllmSharded)(nil)
	_ Local                     = (*Cast)(nil)
	_ SourceCounter             = (*transform)(nil)
	_ artifact.ProgressReporter = (*transform)(nil)
	_ artifact.ProgressReporter = (*passthrough)(nil)
)
