package trust

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"google.golang.org/protobuf/encoding/protojson"
)

// InTotoPayloadType is the DSSE payload type of an in-toto statement.
const InTotoPayloadType = "application/vnd.in-toto+json"

// LoadPrivateKey reads a private key in cosign's format (PEM type
// ENCRYPTED SIGSTORE PRIVATE KEY or ENCRYPTED COSIGN PRIVATE KEY, as
// `cosign generate-key-pair` writes), decrypted with password (cosign
// reads it from COSIGN_PASSWORD). Only ECDSA P-256 keys, cosign's
// default, are supported.
func LoadPrivateKey(pemBytes, password []byte) (crypto.Signer, error) {
	if len(pemBytes) > MaxKeyBytes {
		return nil, fmt.Errorf("private key larger than %d bytes: %w", MaxKeyBytes, errdefs.ErrInvalidArgument)
	}
	k, err := cryptoutils.UnmarshalPEMToPrivateKey(pemBytes, cryptoutils.StaticPasswordFunc(password))
	if err != nil {
		return nil, fmt.Errorf("private key: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("private key: %T: only ECDSA P-256 keys are supported: %w", k, errdefs.ErrNotImplemented)
	}
	return ec, nil
}

// statement is an in-toto Statement v1 as cosign v3 writes it for an
// image signature.
type statement struct {
	Type          string            `json:"_type"`
	Subject       []subject         `json:"subject"`
	PredicateType string            `json:"predicateType"`
	Predicate     map[string]string `json:"predicate"`
}

type subject struct {
	Digest map[string]string `json:"digest"`
}

// SignManifest signs a manifest digest as cosign v3 does: a sigstore
// bundle (v0.3) holding a DSSE envelope of an in-toto statement whose
// subject is the digest and whose predicate type is CosignSignPredicate.
// Nothing is logged or timestamped: the bundle is verified with the key.
func SignManifest(ctx context.Context, key crypto.Signer, manifest digest.Digest) ([]byte, error) {
	if err := manifest.Validate(); err != nil || manifest.Algorithm() != digest.SHA256 {
		return nil, fmt.Errorf("sign: manifest digest %q: want sha256: %w", manifest, errdefs.ErrInvalidArgument)
	}
	payload, err := json.Marshal(statement{
		Type:          "https://in-toto.io/Statement/v1",
		Subject:       []subject{{Digest: map[string]string{"sha256": manifest.Encoded()}}},
		PredicateType: CosignSignPredicate,
		Predicate:     map[string]string{},
	})
	if err != nil {
		return nil, err
	}
	return SignDSSE(ctx, key, InTotoPayloadType, payload)
}

// SignDSSE is a sigstore bundle of a DSSE envelope over payload, signed by key.
func SignDSSE(ctx context.Context, key crypto.Signer, payloadType string, payload []byte) ([]byte, error) {
	kp, err := newKeypair(key)
	if err != nil {
		return nil, err
	}
	pb, err := sign.Bundle(&sign.DSSEData{Data: payload, PayloadType: payloadType}, kp, sign.BundleOptions{Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return protojson.Marshal(pb)
}

// keypair is sigstore-go's signing interface over a loaded ECDSA P-256 key.
type keypair struct {
	key  crypto.Signer
	hint []byte
}

func newKeypair(key crypto.Signer) (*keypair, error) {
	ec, ok := key.Public().(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("sign: only ECDSA P-256 keys are supported: %w", errdefs.ErrNotImplemented)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return &keypair{key: key, hint: []byte(base64.StdEncoding.EncodeToString(sum[:]))}, nil
}

func (k *keypair) GetHashAlgorithm() protocommon.HashAlgorithm {
	return protocommon.HashAlgorithm_SHA2_256
}
func (k *keypair) GetSigningAlgorithm() protocommon.PublicKeyDetails {
	return protocommon.PublicKeyDetails_PKIX_ECDSA_P256_SHA_256
}
func (k *keypair) GetHint() []byte                { return k.hint }
func (k *keypair) GetKeyAlgorithm() string        { return "ECDSA" }
func (k *keypair) GetPublicKey() crypto.PublicKey { return k.key.Public() }
func (k *keypair) GetPublicKeyPem() (string, error) {
	p, err := cryptoutils.MarshalPublicKeyToPEM(k.key.Public())
	return string(p), err
}

// SignData signs the SHA-256 of data.
func (k *keypair) SignData(_ context.Context, data []byte) ([]byte, []byte, error) {
	sum := sha256.Sum256(data)
	sig, err := k.key.Sign(rand.Reader, sum[:], crypto.SHA256)
	return sig, sum[:], err
}

// SignedBy says whether sig is a cosign v3 signature by key of manifest,
// used by ref (a repository), as SignManifest makes one: a signer that
// finds its own signature attached need not attach another.
func SignedBy(key crypto.PublicKey, manifest digest.Digest, ref string, sig Signature) bool {
	if sig.Raw == nil {
		return false
	}
	pem, err := cryptoutils.MarshalPublicKeyToPEM(key)
	if err != nil {
		return false
	}
	m := Match{Requirements: []Requirement{{Type: TypeSigstoreSigned, Keys: []Key{{Source: "the signing key", PEM: pem}},
		Identity: SignedIdentity{Type: IdentityMatchRepoDigestOrExact}}}}
	_, err = VerifyManifest(m, manifest, ref, []Signature{sig}, time.Now())
	return err == nil
}
