package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// Bounds of a verification record, as the store keeps it and a peer
// sends it: whatever its source, it is read as untrusted bytes.
const (
	MaxRecordsBytes     = 16 << 20 // one artifact's records, encoded
	MaxRecords          = 8        // records of one artifact (one per signed manifest)
	MaxRecordSignatures = 8        // signatures kept by one record
	MaxManifestBytes    = 4 << 20  // an OCI manifest (the distribution spec's bound)
)

// Record is how one artifact was verified: the OCI manifest the
// signatures cover (its bytes, and the reference it was read from,
// host/repo@sha256:<digest of those bytes>), the signatures that met the
// policy, and how each requirement was met. The store keeps it beside the
// artifact and a peer sends it with the artifact, so that a node checks
// it again, offline, against its own policy (Check).
type Record struct {
	Ref        string      `json:"ref"`
	Manifest   []byte      `json:"manifest"`
	Signatures []Signature `json:"signatures"`
	Verified   []Verified  `json:"verified"`
}

// records is the encoding of an artifact's records.
type records struct {
	Schema  int      `json:"schema"`
	Records []Record `json:"records"`
}

// NewRecord is the record of a verification: of the signatures found,
// only those a requirement was met with are kept.
func NewRecord(ref string, manifest []byte, sigs []Signature, verified []Verified) Record {
	var kept []Signature
	for _, s := range sigs {
		d := digest.FromBytes(s.Raw)
		if s.Payload != nil {
			d = digest.FromBytes(s.Payload)
		}
		if slices.ContainsFunc(verified, func(v Verified) bool { return v.Signature == d }) && len(kept) < MaxRecordSignatures {
			kept = append(kept, s)
		}
	}
	return Record{Ref: ref, Manifest: manifest, Signatures: kept, Verified: verified}
}

// Digest is the digest of the manifest the record's signatures cover.
func (r Record) Digest() digest.Digest { return digest.FromBytes(r.Manifest) }

// Repository is the record's repository, host/repo.
func (r Record) Repository() string {
	name, _, _ := strings.Cut(r.Ref, "@")
	return name
}

// Signed says whether the record holds a signature (and not only the
// acceptance of a scope that requires none).
func (r Record) Signed() bool { return len(r.Signatures) > 0 }

// validate checks a decoded record's shape: a pinned reference to its
// own manifest's digest, bounded parts.
func (r Record) validate() error {
	named, err := reference.ParseNamed(r.Ref)
	if err != nil {
		return fmt.Errorf("reference %q: %v", r.Ref, err)
	}
	dg, ok := named.(reference.Digested)
	switch {
	case !ok:
		return fmt.Errorf("reference %q is not pinned by a digest", r.Ref)
	case len(r.Manifest) == 0 || len(r.Manifest) > MaxManifestBytes:
		return fmt.Errorf("manifest of %d bytes (1 to %d)", len(r.Manifest), MaxManifestBytes)
	case dg.Digest() != r.Digest():
		return fmt.Errorf("reference %s does not name its manifest, %s", r.Ref, r.Digest())
	case len(r.Signatures) > MaxRecordSignatures:
		return fmt.Errorf("%d signatures, more than %d", len(r.Signatures), MaxRecordSignatures)
	case len(r.Verified) > MaxRequirements:
		return fmt.Errorf("%d verified requirements, more than %d", len(r.Verified), MaxRequirements)
	}
	for _, s := range r.Signatures {
		if len(s.Raw) > MaxBundleBytes || len(s.Payload) > MaxSimplePayloadBytes || (s.Raw == nil) == (s.Payload == nil) {
			return fmt.Errorf("signature %q: want a bundle of at most %d bytes or a cosign v2 payload of at most %d", s.Source, MaxBundleBytes, MaxSimplePayloadBytes)
		}
	}
	return nil
}

// Check verifies the record's signatures again, against m (what the
// policy now requires of the reference the artifact is used by), at
// now: the signatures only, never the artifact's bytes. A record of
// another repository than repo ("" for any) does not apply.
func (r Record) Check(m Match, repo string, now time.Time) ([]Verified, error) {
	if repo != "" && r.Repository() != repo {
		return nil, &Refusal{Scope: m.Scope, Reason: fmt.Sprintf("the recorded signatures are of %s, not %s", r.Repository(), repo)}
	}
	return VerifyManifest(m, r.Digest(), r.Repository(), r.Signatures, now)
}

// EncodeRecords is the encoding of an artifact's records.
func EncodeRecords(rs []Record) ([]byte, error) {
	raw, err := json.Marshal(records{Schema: 1, Records: rs})
	if err != nil {
		return nil, err
	}
	if len(raw) > MaxRecordsBytes {
		return nil, fmt.Errorf("verification records of %d bytes, more than %d: %w", len(raw), MaxRecordsBytes, errdefs.ErrInvalidArgument)
	}
	return raw, nil
}

// DecodeRecords decodes an artifact's records, bounded and strict:
// unknown members, a trailing value, or a record whose reference does not
// name its manifest are refused (errdefs.ErrInvalidArgument).
func DecodeRecords(raw []byte) ([]Record, error) {
	if len(raw) > MaxRecordsBytes {
		return nil, fmt.Errorf("verification records of %d bytes, more than %d: %w", len(raw), MaxRecordsBytes, errdefs.ErrInvalidArgument)
	}
	var rs records
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rs); err != nil {
		return nil, fmt.Errorf("verification records: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if dec.More() {
		return nil, fmt.Errorf("verification records: data after the object: %w", errdefs.ErrInvalidArgument)
	}
	switch {
	case rs.Schema != 1:
		return nil, fmt.Errorf("verification records: schema %d, want 1: %w", rs.Schema, errdefs.ErrInvalidArgument)
	case len(rs.Records) > MaxRecords:
		return nil, fmt.Errorf("verification records: %d, more than %d: %w", len(rs.Records), MaxRecords, errdefs.ErrInvalidArgument)
	}
	for i, r := range rs.Records {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("verification record %d: %v: %w", i, err, errdefs.ErrInvalidArgument)
		}
	}
	return rs.Records, nil
}

// MergeRecord adds r to rs, replacing a record of the same manifest; the
// oldest records go beyond MaxRecords.
func MergeRecord(rs []Record, r Record) []Record {
	rs = slices.DeleteFunc(slices.Clone(rs), func(o Record) bool { return o.Ref == r.Ref })
	rs = append(rs, r)
	if len(rs) > MaxRecords {
		rs = rs[len(rs)-MaxRecords:]
	}
	return rs
}

// MatchRef is what the policy requires of a registry reference
// (host/repo[:tag][@digest]).
func (p *Policy) MatchRef(ref string) (Match, error) {
	named, err := reference.ParseNamed(ref)
	if err != nil {
		return Match{}, fmt.Errorf("reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	return p.For(named), nil
}

// Requires says whether m accepts nothing without a signature: it has a
// requirement other than insecureAcceptAnything.
func (m Match) Requires() bool {
	return slices.ContainsFunc(m.Requirements, func(r Requirement) bool { return r.Type != TypeAcceptAnything })
}
