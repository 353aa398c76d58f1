package trust

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/weightsnap/weightsnap/artifact"
)

// OMSBundleFile is the conventional name of an OMS bundle beside a
// model's files; it is outside the signed scope.
const OMSBundleFile = "model.sig"

// MaxOMSResources bounds the files one OMS statement may list.
const MaxOMSResources = 1 << 16

// omsDefaultIgnores are excluded at the model root whatever the bundle says.
var omsDefaultIgnores = []string{".git", ".gitignore", ".gitattributes", ".github", OMSBundleFile}

// OMSStatement is an OpenSSF model-signing v1.0 in-toto statement.
type OMSStatement struct {
	Type          string       `json:"_type"`
	Subject       []omsSubject `json:"subject"`
	PredicateType string       `json:"predicateType"`
	Predicate     OMSPredicate `json:"predicate"`
}

type omsSubject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// OMSPredicate is the statement's predicate: the files and how they were hashed.
type OMSPredicate struct {
	Resources     []OMSResource    `json:"resources"`
	Serialization OMSSerialization `json:"serialization"`
}

// OMSResource is one signed file. Other members (in-toto resource
// descriptors allow them) are read and ignored.
type OMSResource struct {
	Name      string `json:"name"`
	Digest    string `json:"digest"`
	Algorithm string `json:"algorithm"`
}

// OMSSerialization says how the files were enumerated and hashed.
type OMSSerialization struct {
	Method        string   `json:"method"`
	HashType      string   `json:"hash_type"`
	ShardSize     *int64   `json:"shard_size,omitempty"`
	AllowSymlinks *bool    `json:"allow_symlinks"`
	IgnorePaths   []string `json:"ignore_paths,omitempty"`
}

// OMSBundle is a parsed OMS bundle: the sigstore bundle and its statement.
type OMSBundle struct {
	Bundle    *bundle.Bundle
	Statement OMSStatement
	// Root is the statement's root digest recomputed from its resources.
	Root []byte
}

// ParseOMS decodes an OMS v1.0 bundle: a sigstore bundle with a DSSE
// envelope of an in-toto statement of predicate type OMSPredicateType, with
// verification material (and a log entry for a keyless certificate).
// The statement is decoded strictly; nothing is verified yet.
func ParseOMS(raw []byte) (*OMSBundle, error) {
	bad := func(format string, args ...any) (*OMSBundle, error) {
		return nil, fmt.Errorf("oms bundle: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	// OMS's certificate method carries a chain, which v0.3 bundles
	// otherwise may not.
	b, err := ParseBundle(raw, bundle.AllowCertificateChain())
	if err != nil {
		return nil, err
	}
	if b.Bundle.GetVerificationMaterial() == nil {
		return bad("no verification material")
	}
	env := b.Bundle.GetDsseEnvelope()
	if env == nil {
		return bad("no DSSE envelope")
	}
	if env.GetPayloadType() != InTotoPayloadType {
		return bad("payload type %q, want %s", env.GetPayloadType(), InTotoPayloadType)
	}
	if b.Bundle.GetVerificationMaterial().GetCertificate() != nil && len(b.Bundle.GetVerificationMaterial().GetTlogEntries()) == 0 {
		return bad("a keyless certificate without a transparency log entry")
	}
	o := &OMSBundle{Bundle: b}
	if err := decodeStatement(env.GetPayload(), &o.Statement); err != nil {
		return bad("statement: %v", err)
	}
	st := &o.Statement
	if st.Type != "https://in-toto.io/Statement/v1" {
		return bad("statement type %q", st.Type)
	}
	if st.PredicateType != OMSPredicateType {
		return bad("predicate type %q, want %s", st.PredicateType, OMSPredicateType)
	}
	if len(st.Subject) != 1 || st.Subject[0].Name == "" || len(st.Subject[0].Digest["sha256"]) != 64 {
		return bad("want one subject with a name and a sha256 root digest")
	}
	ser := st.Predicate.Serialization
	switch {
	case ser.Method != "files" && ser.Method != "shards":
		return bad("serialization method %q", ser.Method)
	case ser.AllowSymlinks == nil:
		return bad("serialization without allow_symlinks")
	case ser.Method == "files" && ser.ShardSize != nil:
		return bad("shard_size with method files")
	case ser.Method == "shards" && (ser.ShardSize == nil || *ser.ShardSize <= 0):
		return bad("method shards without a positive shard_size")
	}
	want := digestLen[ser.HashType]
	if want == 0 {
		return bad("hash_type %q (want sha256, blake2b or blake3)", ser.HashType)
	}
	res := st.Predicate.Resources
	if len(res) == 0 || len(res) > MaxOMSResources {
		return bad("%d resources, want 1 to %d", len(res), MaxOMSResources)
	}
	h := sha256.New()
	for i, r := range res {
		if r.Algorithm != ser.HashType {
			return bad("resource %q: algorithm %q, the serialization's is %q", r.Name, r.Algorithm, ser.HashType)
		}
		d, err := hex.DecodeString(r.Digest)
		if err != nil || len(d) != want || strings.ToLower(r.Digest) != r.Digest {
			return bad("resource %q: digest %q is not %d bytes of lowercase hex", r.Name, r.Digest, want)
		}
		if ser.Method == "files" && !canonical(r.Name) {
			return bad("resource name %q is not a canonical relative path", r.Name)
		}
		if i > 0 && res[i-1].Name >= r.Name {
			return bad("resources not sorted by name, or %q twice", r.Name)
		}
		h.Write(d)
	}
	for _, p := range ser.IgnorePaths {
		if !canonical(p) || strings.ContainsAny(p, "*?[") {
			return bad("ignore path %q", p)
		}
	}
	o.Root = h.Sum(nil)
	return o, nil
}

var digestLen = map[string]int{"sha256": 32, "blake2b": 64, "blake3": 32}

// decodeStatement decodes the statement, refusing unknown members of
// the statement, predicate and serialization (the spec's schemas close
// them); resource descriptors may carry others.
func decodeStatement(raw []byte, st *OMSStatement) error {
	var probe struct {
		OMSStatement
		Predicate struct {
			Resources     []json.RawMessage `json:"resources"`
			Serialization OMSSerialization  `json:"serialization"`
		} `json:"predicate"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&probe); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the statement")
	}
	*st = probe.OMSStatement
	st.Predicate.Serialization = probe.Predicate.Serialization
	st.Predicate.Resources = make([]OMSResource, len(probe.Predicate.Resources))
	for i, r := range probe.Predicate.Resources {
		if err := json.Unmarshal(r, &st.Predicate.Resources[i]); err != nil {
			return fmt.Errorf("resource %d: %v", i, err)
		}
	}
	return nil
}

// canonical is a clean relative POSIX path: no leading /, no . or ..
// components, no empty components, no trailing /.
func canonical(p string) bool {
	return p != "" && p != "." && !strings.HasPrefix(p, "/") && path.Clean(p) == p && !strings.HasPrefix(p, "../") && p != ".."
}

// ignored reports whether a path of the artifact is outside the signed
// scope: under a default exclusion at the root or an ignore path.
func ignored(p string, ignores []string) bool {
	for _, set := range [][]string{omsDefaultIgnores, ignores} {
		for _, ig := range set {
			if p == ig || strings.HasPrefix(p, ig+"/") {
				return true
			}
		}
	}
	return false
}

// CheckFiles compares the statement with the digests the store computed
// while writing the artifact (its index): every resource names a file of
// the artifact with that digest, and every file outside the ignored
// paths is a resource. BLAKE3 is compared only where the index holds a
// whole-file BLAKE3; blake2b and shard serialization would need a second
// pass over the bytes and are refused.
func (o *OMSBundle) CheckFiles(idx *artifact.Index) error {
	ser := o.Statement.Predicate.Serialization
	bad := func(format string, args ...any) error {
		return fmt.Errorf("oms: "+format+": %w", append(args, errdefs.ErrFailedPrecondition)...)
	}
	if ser.Method != "files" {
		return fmt.Errorf("oms: serialization %q needs a second pass over the bytes, which weightsnap does not make (sign with method files): %w", ser.Method, errdefs.ErrNotImplemented)
	}
	if ser.HashType != "sha256" && ser.HashType != "blake3" {
		return fmt.Errorf("oms: hash_type %s is not what the store records (sha256, blake3): %w", ser.HashType, errdefs.ErrNotImplemented)
	}
	files := map[string]artifact.FileEntry{}
	for _, f := range idx.Files {
		files[f.Path] = f
	}
	signed := map[string]bool{}
	for _, r := range o.Statement.Predicate.Resources {
		f, ok := files[r.Name]
		if !ok {
			return bad("signed file %q is not in the artifact", r.Name)
		}
		signed[r.Name] = true
		have := f.SHA256
		if ser.HashType == "blake3" {
			if idx.Schema != artifact.IndexSchemaWholeFile && artifact.IsSafetensors(f.Path) {
				return fmt.Errorf("oms: %s: the store holds its tensor tree, not the whole file's BLAKE3 (sign with sha256): %w", f.Path, errdefs.ErrNotImplemented)
			}
			have = f.BLAKE3
		}
		if have != r.Digest {
			return bad("%s: %s %s, the signature says %s", f.Path, ser.HashType, have, r.Digest)
		}
	}
	var extra []string
	for _, f := range idx.Files {
		if !signed[f.Path] && !ignored(f.Path, ser.IgnorePaths) {
			extra = append(extra, f.Path)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return bad("unsigned files: %s", strings.Join(extra, ", "))
	}
	return nil
}

// VerifyOMS checks an OMS bundle for an artifact against m: the bundle's
// signature by a key or identity the requirement trusts over its
// statement, and the statement against the artifact's index (no second
// pass over the bytes).
func VerifyOMS(m Match, sig Signature, idx *artifact.Index, now time.Time) ([]Verified, error) {
	o, err := ParseOMS(sig.Raw)
	if err != nil {
		return nil, &Refusal{Scope: m.Scope, Reason: fmt.Sprintf("%s: %v", sig.Source, err)}
	}
	if err := o.CheckFiles(idx); err != nil {
		return nil, &Refusal{Scope: m.Scope, Reason: fmt.Sprintf("%s: %v", sig.Source, err)}
	}
	return verifyAll(m, []Signature{sig}, now, []bundle.Option{bundle.AllowCertificateChain()}, nil, omsMeets, func(b *bundle.Bundle, v verifier) (*verify.VerificationResult, error) {
		return v.v.Verify(b, verify.NewPolicy(verify.WithArtifactDigest("sha256", o.Root), v.policy))
	})
}

// omsMeets says whether a model.sig can meet a signedIdentity: it names
// the files' digests and no image, so only the rules that accept an
// image by its content, matchRepoDigestOrExact and matchExact.
func omsMeets(id SignedIdentity) (bool, string) {
	if id.Type == IdentityMatchRepoDigestOrExact || id.Type == IdentityMatchExact {
		return true, ""
	}
	return false, fmt.Sprintf("signedIdentity %s needs a signature naming an image; a model.sig names only the files' digests", id.Type)
}

// MatchOMS is what the policy requires of a model.sig of the model
// repository repo, and the reference its record keeps: repo's scope when
// it is a registry repository (host/repo, or host/repo:tag), else the
// policy's default scope and "".
func (p *Policy) MatchOMS(repo string) (Match, string) {
	if repo != "" {
		named, err := reference.ParseNamed(repo)
		if _, digested := named.(reference.Digested); err == nil && !digested {
			return p.For(named), named.String()
		}
	}
	return Match{Scope: "default", Requirements: p.Default}, ""
}
