// Package artifact defines what a weight artifact is: the identity and its
// ID, the safetensors files it holds, the tensor index that describes them,
// and the contracts of the producers, writers and seeders that make it.
// The restorers that use it are package loader's.
package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
)

// IdentitySchema is the version of the Identity encoding written by this code.
const IdentitySchema = 1

// Identity is the exact semantic identity of a weight artifact. Two identities
// that differ in any field name different artifacts. Transfer policy (mmap or
// pinned staging, RDMA or TCP) is never part of it.
type Identity struct {
	Schema         int            `json:"schema"`
	Model          Model          `json:"model"`
	Component      string         `json:"component"`
	Representation Representation `json:"representation"`
	Layout         Layout         `json:"layout"`
	Adaptation     *Adaptation    `json:"adaptation,omitempty"`
	// Cache is set on a compile cache's identity only (component
	// compile-cache): what makes the cache valid besides the model.
	Cache    *CacheKey   `json:"cache,omitempty"`
	Producer ProducerRef `json:"producer"`
}

// Model names the immutable model revision and the source files it came from.
type Model struct {
	// Repository is the model's name, e.g. "meta-llama/Llama-3.1-8B" (informational, part of identity).
	Repository string `json:"repository,omitempty"`
	// Revision is an immutable revision: a 40-hex commit or an "algo:hex" digest.
	Revision string `json:"revision"`
	// Source is the source fingerprint: files sorted by path.
	Source []SourceFile `json:"source"`
}

// SourceFile is one file of the canonical source checkpoint.
type SourceFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // 64 lower-case hex: the Hugging Face LFS oid
}

// Representation says how the numbers are stored.
type Representation struct {
	DType        string            `json:"dtype"` // a safetensors dtype name, or "source" for as-is
	Quantization string            `json:"quantization,omitempty"`
	QuantParams  map[string]string `json:"quant_params,omitempty"`
}

// Layout is the tensor layout and the parallel coordinates that change contents.
type Layout struct {
	Name      string `json:"name"`
	TPSize    int    `json:"tp_size,omitempty"`
	TPRank    int    `json:"tp_rank,omitempty"`
	SPSize    int    `json:"sp_size,omitempty"`
	SPBackend string `json:"sp_backend,omitempty"`
	PPStage   *int   `json:"pp_stage,omitempty"`
	EPRank    *int   `json:"ep_rank,omitempty"`
	// DPRank is set only for weights that differ per data-parallel rank;
	// replicated weights never carry it.
	DPRank     *int `json:"dp_rank,omitempty"`
	Replicated bool `json:"replicated,omitempty"`
}

// Adaptation is a static adaptation merged into the weights.
type Adaptation struct {
	LoRAFingerprint string `json:"lora_fingerprint"`
}

// ProducerRef names the producer that made the artifact and the schemas of its files.
type ProducerRef struct {
	Name           string `json:"name"`
	Version        string `json:"version"`
	Fingerprint    string `json:"fingerprint"`
	ManifestSchema int    `json:"manifest_schema"`
	RestorerSchema int    `json:"restorer_schema"`
}

// CanonicalJSON returns the canonical encoding: sorted keys, no insignificant
// white space, UTF-8, integers only. It does not validate the identity.
func (id Identity) CanonicalJSON() ([]byte, error) {
	raw, err := json.Marshal(id)
	if err != nil {
		return nil, fmt.Errorf("encode identity: %w", err)
	}
	return Canonicalize(raw)
}

// ID returns the identity's digest: the sha256 of its canonical JSON.
func (id Identity) ID() (ID, error) {
	c, err := id.CanonicalJSON()
	if err != nil {
		return ID{}, err
	}
	sum := sha256.Sum256(c)
	return ID{hex: hex.EncodeToString(sum[:])}, nil
}

// Canonicalize re-encodes a JSON document with sorted object keys, no
// insignificant white space and no HTML escaping. Numbers must be integers.
func Canonicalize(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("canonicalize: trailing data after JSON value")
	}
	if err := checkIntegers(v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func checkIntegers(v any) error {
	switch t := v.(type) {
	case json.Number:
		if _, err := t.Int64(); err != nil {
			return fmt.Errorf("canonicalize: %q is not an integer", t.String())
		}
	case map[string]any:
		for _, e := range t {
			if err := checkIntegers(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range t {
			if err := checkIntegers(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// ParseIdentity decodes an identity document, rejecting unknown fields and
// trailing data, and validates it.
func ParseIdentity(doc []byte) (Identity, error) {
	var id Identity
	if err := DecodeStrictJSON(bytes.NewReader(doc), &id); err != nil {
		return Identity{}, identityError("", "%v", err)
	}
	if err := id.Validate(); err != nil {
		return Identity{}, err
	}
	return id, nil
}
