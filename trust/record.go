package trust

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/weightsnap/weightsnap/artifact"
)

// Bounds of a verification record, as the store keeps it and a peer
// sends it: whatever its source, it is read as untrusted bytes. One
// artifact's records, encoded, are at most artifact.MaxRecordsBytes.
const (
	MaxRecords          = 8       // records of one artifact (one per signed manifest)
	MaxRecordSignatures = 8       // signatures kept by one record
	MaxManifestBytes    = 4 << 20 // an OCI manifest (the distribution spec's bound)
)

// Record is how one artifact was verified: the OCI manifest the
// signatures cover (its bytes, and the reference it was read from,
// host/repo@sha256:<digest of those bytes>), the signatures that met the
// policy, and how each requirement was met. The store keeps it beside the
// artifact and a peer sends it with the artifact, so that a node checks
// it again, offline, against its own policy (Check).
//
// A record of kind KindOMS is instead an OMS bundle (a model.sig) over the
// artifact's files: Ref is the repository (and tag) the scope was
// matched with ("" the policy's default), Scope the scope it was verified under, no
// manifest, and the one bundle; it is checked again against the
// artifact's index, the digests the store computed (CheckOMS).
type Record struct {
	Kind       string      `json:"kind,omitempty"`
	Ref        string      `json:"ref"`
	Scope      string      `json:"scope,omitempty"`
	Manifest   []byte      `json:"manifest,omitempty"`
	Signatures []Signature `json:"signatures"`
	Verified   []Verified  `json:"verified"`
}

// Kinds of a record.
const (
	KindManifest = ""    // signatures of an OCI manifest
	KindOMS      = "oms" // an OMS bundle over the artifact's files
)

// MaxScopeBytes bounds a recorded scope.
const MaxScopeBytes = 4096

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

// NewOMSRecord is the record of an OMS bundle verified under scope for
// the repository ref ("" none): nil when no requirement was met with its
// signature (a scope that wants none accepted it).
func NewOMSRecord(ref, scope string, sig Signature, verified []Verified) Record {
	r := NewRecord(ref, nil, []Signature{sig}, verified)
	r.Kind, r.Scope = KindOMS, scope
	return r
}

// Digest is the digest of the manifest the record's signatures cover; of
// an OMS record, of its bundle.
func (r Record) Digest() digest.Digest {
	if r.Kind == KindOMS && len(r.Signatures) == 1 {
		return digest.FromBytes(r.Signatures[0].Raw)
	}
	return digest.FromBytes(r.Manifest)
}

// Repository is the record's repository, host/repo.
func (r Record) Repository() string {
	name, _, _ := strings.Cut(r.Ref, "@")
	return name
}

// Name is how messages name the record: its reference, or for an OMS
// record the model.sig and its repository.
func (r Record) Name() string {
	switch {
	case r.Kind != KindOMS:
		return r.Ref
	case r.Ref == "":
		return OMSBundleFile + " (no repository)"
	}
	return OMSBundleFile + " (" + r.Ref + ")"
}

// Signed says whether the record holds a signature (and not only the
// acceptance of a scope that requires none).
func (r Record) Signed() bool { return len(r.Signatures) > 0 }

// validate checks a decoded record's shape: a pinned reference to its
// own manifest's digest, bounded parts.
func (r Record) validate() error {
	switch r.Kind {
	case KindManifest:
	case KindOMS:
		return r.validateOMS()
	default:
		return fmt.Errorf("kind %q (want \"\" or %q)", r.Kind, KindOMS)
	}
	if r.Scope != "" {
		return fmt.Errorf("a manifest record with a scope")
	}
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

// validateOMS checks a decoded OMS record's shape: a repository name or
// none, a bounded scope, no manifest, one bundle that parses.
func (r Record) validateOMS() error {
	if r.Ref != "" {
		named, err := reference.ParseNamed(r.Ref)
		if _, digested := named.(reference.Digested); err != nil || digested {
			return fmt.Errorf("oms record: reference %q is not a repository name (and tag)", r.Ref)
		}
	}
	switch {
	case r.Scope == "" || len(r.Scope) > MaxScopeBytes:
		return fmt.Errorf("oms record: scope of %d bytes (1 to %d)", len(r.Scope), MaxScopeBytes)
	case r.Manifest != nil:
		return fmt.Errorf("oms record with a manifest")
	case len(r.Signatures) != 1 || r.Signatures[0].Raw == nil || r.Signatures[0].Payload != nil || len(r.Signatures[0].Raw) > MaxBundleBytes:
		return fmt.Errorf("oms record: want one bundle of at most %d bytes", MaxBundleBytes)
	case len(r.Verified) > MaxRequirements:
		return fmt.Errorf("%d verified requirements, more than %d", len(r.Verified), MaxRequirements)
	}
	if _, err := ParseOMS(r.Signatures[0].Raw); err != nil {
		return fmt.Errorf("oms record: %v", err)
	}
	return nil
}

// Check verifies the record's signatures again, against m (what the
// policy now requires of the reference the artifact is used by), at
// now: the signatures only, never the artifact's bytes. ref is that
// reference: host/repo:tag or host/repo@digest is matched against each
// signature's identity as a pull of it would be; a bare host/repo, or ""
// for the record's own, is the record's manifest by digest. A record of
// another repository, or of another manifest than ref's digest, does not
// apply. An OMS record applies only under the scope it was verified
// under, and its statement is checked against idx, the artifact's index
// (nil: refused).
func (r Record) Check(m Match, ref string, idx *artifact.Index, now time.Time) ([]Verified, error) {
	if r.Kind == KindOMS {
		return r.checkOMS(m, idx, now)
	}
	if ref == "" {
		return VerifyManifest(m, r.Digest(), r.Ref, r.Signatures, now)
	}
	named, err := reference.ParseNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	if named.Name() != r.Repository() {
		return nil, &Refusal{Scope: m.Scope, Reason: fmt.Sprintf("the recorded signatures are of %s, not %s", r.Repository(), named.Name())}
	}
	if d, ok := named.(reference.Digested); ok && d.Digest() != r.Digest() {
		return nil, &Refusal{Scope: m.Scope, Reason: fmt.Sprintf("the recorded signatures are of manifest %s, not %s", r.Digest(), d.Digest())}
	}
	return VerifyManifest(m, r.Digest(), ref, r.Signatures, now)
}

func (r Record) checkOMS(m Match, idx *artifact.Index, now time.Time) ([]Verified, error) {
	switch {
	case m.Scope != r.Scope:
		return nil, &Refusal{Scope: m.Scope, Reason: fmt.Sprintf("the recorded model.sig was verified under scope %q, not this one", r.Scope)}
	case idx == nil:
		return nil, &Refusal{Scope: m.Scope, Reason: "the recorded model.sig is checked against the artifact's files, and none were given"}
	case len(r.Signatures) != 1:
		return nil, &Refusal{Scope: m.Scope, Reason: "an OMS record without its bundle"}
	}
	return VerifyOMS(m, r.Signatures[0], idx, now)
}

// EncodeRecords is the encoding of an artifact's records.
func EncodeRecords(rs []Record) ([]byte, error) {
	raw, err := json.Marshal(records{Schema: 1, Records: rs})
	if err != nil {
		return nil, err
	}
	if len(raw) > artifact.MaxRecordsBytes {
		return nil, fmt.Errorf("verification records of %d bytes, more than %d: %w", len(raw), artifact.MaxRecordsBytes, errdefs.ErrInvalidArgument)
	}
	return raw, nil
}

// DecodeRecords decodes an artifact's records, bounded and strict:
// unknown members, a trailing value, or a record whose reference does not
// name its manifest are refused (errdefs.ErrInvalidArgument).
func DecodeRecords(raw []byte) ([]Record, error) {
	if len(raw) > artifact.MaxRecordsBytes {
		return nil, fmt.Errorf("verification records of %d bytes, more than %d: %w", len(raw), artifact.MaxRecordsBytes, errdefs.ErrInvalidArgument)
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

// MergeRecord adds r to rs, replacing a record of the same manifest (of
// an OMS record: of the same kind, repository and scope); the oldest
// records go beyond MaxRecords.
func MergeRecord(rs []Record, r Record) []Record {
	rs = slices.DeleteFunc(slices.Clone(rs), func(o Record) bool { return o.Kind == r.Kind && o.Ref == r.Ref && o.Scope == r.Scope })
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

// RecordStore keeps an artifact's encoded records (package store's
// Domain): edit gets them (nil for none) and returns the new ones.
type RecordStore interface {
	EditRecords(ctx context.Context, id artifact.ID, edit func([]byte) ([]byte, error)) error
}

// Keep adds rec to the records s keeps of id (MergeRecord), before the
// artifact is published. A record without a signature (a scope that
// wants none accepted it) is not kept: the artifact stays "unverified",
// and its peers are sent nothing. A corrupt record is replaced.
func Keep(ctx context.Context, s RecordStore, id artifact.ID, rec Record) error {
	if !rec.Signed() {
		return nil
	}
	err := s.EditRecords(ctx, id, func(old []byte) ([]byte, error) {
		var rs []Record
		if old != nil {
			var err error
			if rs, err = DecodeRecords(old); err != nil {
				log.G(ctx).WithError(err).WithField("id", id.Short()).Warn("trust: a corrupt verification record is replaced")
				rs = nil
			}
		}
		return EncodeRecords(MergeRecord(rs, rec))
	})
	if err != nil {
		return fmt.Errorf("record the verification of %s: %w", id.Short(), err)
	}
	return nil
}
