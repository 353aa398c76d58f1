package trust

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// MaxBundleBytes bounds one sigstore bundle (a cosign signature, an OMS
// model.sig): certificates and a log entry are a few KiB, an OMS
// statement about 150 bytes a file.
const MaxBundleBytes = 4 << 20

// Predicate types the verifier accepts.
const (
	// CosignSignPredicate is what cosign v3 signs: an in-toto statement
	// whose subject is the manifest digest.
	CosignSignPredicate = "https://sigstore.dev/cosign/sign/v1"
	// OMSPredicate is an OpenSSF model-signing v1.0 statement.
	OMSPredicateType = "https://model_signing/signature/v1.0"
)

// Refusal is an artifact the policy does not accept: which scope applied
// and what was missing, or which key or identity did not match.
type Refusal struct {
	Scope  string
	Reason string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("trust policy scope %q refuses it: %s", r.Scope, r.Reason)
}

// TrustScope is the scope that refused: resolution classes a refusal by
// it (a policy failure) without importing this package.
func (r *Refusal) TrustScope() string { return r.Scope }

// Unwrap classifies a refusal as permission denied.
func (r *Refusal) Unwrap() error { return errdefs.ErrPermissionDenied }

// Verified is how one requirement was met: what inspect shows.
type Verified struct {
	Scope     string        `json:"scope"`
	Type      string        `json:"type"`
	Key       string        `json:"key,omitempty"`      // sha256:<hex> of the key's DER (SubjectPublicKeyInfo)
	Identity  string        `json:"identity,omitempty"` // certificate subject and issuer
	Signature digest.Digest `json:"signature,omitempty"`
	Time      time.Time     `json:"time"`
}

// ParseBundle decodes a sigstore bundle (v0.1 to v0.3), bounded and
// strict: unknown members are refused.
func ParseBundle(raw []byte, opts ...bundle.Option) (*bundle.Bundle, error) {
	if len(raw) > MaxBundleBytes {
		return nil, fmt.Errorf("bundle of %d bytes, more than %d: %w", len(raw), MaxBundleBytes, errdefs.ErrInvalidArgument)
	}
	var b bundle.Bundle
	for _, o := range opts {
		o(&b)
	}
	if err := b.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("bundle: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return &b, nil
}

// ReadBundle reads and parses a bundle of at most MaxBundleBytes.
func ReadBundle(r io.Reader) (*bundle.Bundle, []byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxBundleBytes+1))
	if err != nil {
		return nil, nil, err
	}
	b, err := ParseBundle(raw)
	return b, raw, err
}

// verifier is one way a sigstoreSigned requirement can be met: a key, or
// the Fulcio CA with the Rekor keys.
type verifier struct {
	v      *verify.Verifier
	policy verify.PolicyOption
	key    string             // fingerprint, for keys
	sv     signature.Verifier // the key, for cosign v2 signatures
	logged bool               // the requirement wants a transparency-log entry
}

// verifiers builds the sigstore-go verifiers of a sigstoreSigned
// requirement. Nothing they do reaches the network: keys are the
// policy's, and a Fulcio certificate's time comes from the bundle's log
// entry, checked against the policy's Rekor keys.
func (r *Requirement) verifiers() ([]verifier, error) {
	rekor, err := rekorLogs(r.RekorKeys)
	if err != nil {
		return nil, err
	}
	if r.Fulcio != nil {
		ca, err := fulcioCA(r.Fulcio.CAPEM)
		if err != nil {
			return nil, err
		}
		tm := &material{cas: []root.CertificateAuthority{ca}, logs: rekor}
		v, err := verify.NewVerifier(tm, verify.WithTransparencyLog(1), verify.WithIntegratedTimestamps(1))
		if err != nil {
			return nil, err
		}
		id, err := verify.NewShortCertificateIdentity(r.Fulcio.OIDCIssuer, "", r.Fulcio.SubjectEmail, "")
		if err != nil {
			return nil, fmt.Errorf("fulcio identity: %w", err)
		}
		return []verifier{{v: v, policy: verify.WithCertificateIdentity(id)}}, nil
	}
	var out []verifier
	for _, k := range r.Keys {
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(k.PEM)
		if err != nil {
			return nil, fmt.Errorf("key %s: %v: %w", k.Source, err, errdefs.ErrInvalidArgument)
		}
		sv, err := signature.LoadDefaultVerifier(pub)
		if err != nil {
			return nil, fmt.Errorf("key %s: %v: %w", k.Source, err, errdefs.ErrInvalidArgument)
		}
		fp, err := Fingerprint(pub)
		if err != nil {
			return nil, err
		}
		tm := &material{key: root.NewExpiringKey(sv, time.Time{}, time.Time{}), logs: rekor}
		opts := []verify.VerifierOption{verify.WithNoObserverTimestamps()}
		if len(rekor) > 0 {
			// With a log's key the policy wants the signature logged.
			opts = []verify.VerifierOption{verify.WithTransparencyLog(1), verify.WithIntegratedTimestamps(1)}
		}
		v, err := verify.NewVerifier(tm, opts...)
		if err != nil {
			return nil, err
		}
		out = append(out, verifier{v: v, policy: verify.WithKey(), key: fp, sv: sv, logged: len(rekor) > 0})
	}
	return out, nil
}

// Fingerprint is sha256:<hex> of a public key's DER encoding.
func Fingerprint(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// material is the trusted material of one requirement.
type material struct {
	root.BaseTrustedMaterial
	key  *root.ExpiringKey
	cas  []root.CertificateAuthority
	logs map[string]*root.TransparencyLog
}

func (m *material) PublicKeyVerifier(string) (root.TimeConstrainedVerifier, error) {
	if m.key == nil {
		return nil, errors.New("the policy trusts no key here")
	}
	return m.key, nil
}
func (m *material) FulcioCertificateAuthorities() []root.CertificateAuthority { return m.cas }
func (m *material) RekorLogs() map[string]*root.TransparencyLog               { return m.logs }

// rekorLogs are the transparency logs of PEM public keys, by log ID (the
// sha256 of the key's DER, as Rekor names itself).
func rekorLogs(pems [][]byte) (map[string]*root.TransparencyLog, error) {
	logs := map[string]*root.TransparencyLog{}
	for _, p := range pems {
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("rekor public key: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return nil, err
		}
		id := sha256.Sum256(der)
		logs[hex.EncodeToString(id[:])] = &root.TransparencyLog{
			ID: id[:], HashFunc: crypto.SHA256, PublicKey: pub, SignatureHashFunc: crypto.SHA256,
			// The policy names no validity: the key is trusted for every
			// entry (sigstore-go wants a start).
			ValidityPeriodStart: time.Unix(0, 0).UTC(),
		}
	}
	return logs, nil
}

// fulcioCA is a CA from a PEM bundle: the self-signed certificate is the
// root, the others intermediates.
func fulcioCA(pemBytes []byte) (root.CertificateAuthority, error) {
	ca := &root.FulcioCertificateAuthority{}
	rest := bytes.TrimSpace(pemBytes)
	for len(rest) > 0 {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, fmt.Errorf("fulcio CA: not PEM certificates: %w", errdefs.ErrInvalidArgument)
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("fulcio CA: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if bytes.Equal(cert.RawIssuer, cert.RawSubject) && ca.Root == nil {
			ca.Root = cert
		} else {
			ca.Intermediates = append(ca.Intermediates, cert)
		}
		rest = bytes.TrimSpace(rest)
	}
	if ca.Root == nil {
		return nil, fmt.Errorf("fulcio CA: no self-signed root certificate: %w", errdefs.ErrInvalidArgument)
	}
	return ca, nil
}

// Signature is one signature found for an artifact, as it was read: a
// sigstore bundle (Raw), or a cosign v2 simple signature (Payload, the
// simple-signing payload, and Sig, its base64 signature).
type Signature struct {
	// Source says where it came from: a referrer's digest, a tag, a file.
	Source  string `json:"source"`
	Raw     []byte `json:"bundle,omitempty"`
	Payload []byte `json:"payload,omitempty"`
	Sig     string `json:"signature,omitempty"`
}

// VerifyManifest checks that the signatures satisfy every requirement of
// m for the manifest with digest manifest, used by ref (host/repo:tag or
// host/repo@digest; a bare host/repo is read as host/repo@manifest): each
// sigstoreSigned requirement needs, by one of its keys or its
// certificate identity, either a cosign v2 signature whose payload names
// that digest and an image its signedIdentity accepts for ref, or a
// cosign v3 bundle whose statement's subject is that digest where the
// signedIdentity lets a bundle meet it (SignedIdentity.BundleMeets).
func VerifyManifest(m Match, manifest digest.Digest, ref string, sigs []Signature, now time.Time) ([]Verified, error) {
	intended, err := intendedRef(ref, manifest)
	if err != nil {
		return nil, err
	}
	simple := func(s Signature, v verifier, id SignedIdentity) error {
		return checkSimple(s, v, manifest, id, intended)
	}
	bundleMeets := func(id SignedIdentity) (bool, string) { return id.BundleMeets(intended) }
	return verifyAll(m, sigs, now, nil, simple, bundleMeets, func(b *bundle.Bundle, v verifier) (*verify.VerificationResult, error) {
		if err := manifest.Validate(); err != nil || manifest.Algorithm() != digest.SHA256 {
			return nil, fmt.Errorf("manifest digest %q: want sha256", manifest)
		}
		raw, _ := hex.DecodeString(manifest.Encoded())
		res, err := v.v.Verify(b, verify.NewPolicy(verify.WithArtifactDigest("sha256", raw), v.policy))
		if err != nil {
			return nil, err
		}
		if res.Statement == nil || res.Statement.PredicateType != CosignSignPredicate {
			return nil, fmt.Errorf("not a cosign signature statement (predicate %s)", predicateOf(res))
		}
		return res, nil
	})
}

// intendedRef is the reference an image is used by, as the identity
// rules see it: ref as it is, or for a bare repository its digest
// reference to manifest.
func intendedRef(ref string, manifest digest.Digest) (reference.Named, error) {
	named, err := reference.ParseNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	if !reference.IsNameOnly(named) {
		return named, nil
	}
	out, err := reference.WithDigest(named, manifest)
	if err != nil {
		return nil, fmt.Errorf("reference %s@%s: %v: %w", ref, manifest, err, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

func predicateOf(res *verify.VerificationResult) string {
	if res.Statement == nil {
		return "none: a message signature"
	}
	return res.Statement.PredicateType
}

// verifyAll applies the requirements of m in order. simple verifies a
// cosign v2 signature with one way of meeting a requirement and its
// signedIdentity (nil: none apply); bundleMeets says whether a bundle
// can meet a signedIdentity, and why not; check verifies one bundle
// (parsed with the options parse) with one way of meeting a requirement.
func verifyAll(m Match, sigs []Signature, now time.Time, parse []bundle.Option, simple func(Signature, verifier, SignedIdentity) error, bundleMeets func(SignedIdentity) (bool, string), check func(*bundle.Bundle, verifier) (*verify.VerificationResult, error)) ([]Verified, error) {
	var done []Verified
	for _, req := range m.Requirements {
		switch req.Type {
		case TypeAcceptAnything:
			done = append(done, Verified{Scope: m.Scope, Type: req.Type, Time: now})
			continue
		case TypeReject:
			return nil, &Refusal{Scope: m.Scope, Reason: "the policy rejects every artifact here"}
		}
		if len(sigs) == 0 {
			return nil, &Refusal{Scope: m.Scope, Reason: "no signature found: sigstoreSigned is required"}
		}
		vs, err := req.verifiers()
		if err != nil {
			return nil, fmt.Errorf("trust policy scope %q: %w", m.Scope, err)
		}
		var why []string
		var got *Verified
		for _, s := range sigs {
			if s.Payload != nil {
				for _, v := range vs {
					err := fmt.Errorf("cosign v2 signatures do not apply here")
					if simple != nil {
						err = simple(s, v, req.Identity)
					}
					if err != nil {
						why = append(why, fmt.Sprintf("%s: %v", s.Source, err))
						continue
					}
					got = &Verified{Scope: m.Scope, Type: req.Type, Key: v.key, Signature: digest.FromBytes(s.Payload), Time: now}
					break
				}
				if got != nil {
					break
				}
				continue
			}
			if ok, reason := bundleMeets(req.Identity); !ok {
				why = append(why, fmt.Sprintf("%s: %s", s.Source, reason))
				continue
			}
			b, err := ParseBundle(s.Raw, parse...)
			if err != nil {
				why = append(why, fmt.Sprintf("%s: %v", s.Source, err))
				continue
			}
			for _, v := range vs {
				res, err := check(b, v)
				if err != nil {
					why = append(why, fmt.Sprintf("%s: %v", s.Source, err))
					continue
				}
				got = &Verified{Scope: m.Scope, Type: req.Type, Key: v.key, Signature: digest.FromBytes(s.Raw), Time: now}
				if res.VerifiedIdentity != nil {
					got.Identity = res.VerifiedIdentity.SubjectAlternativeName.SubjectAlternativeName + " (" + res.VerifiedIdentity.Issuer.Issuer + ")"
				}
				break
			}
			if got != nil {
				break
			}
		}
		if got == nil {
			return nil, &Refusal{Scope: m.Scope, Reason: "no signature by a key or identity the policy trusts: " + strings.Join(why, "; ")}
		}
		done = append(done, *got)
	}
	return done, nil
}
