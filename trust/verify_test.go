package trust

import (
	"bytes"
	"context"
	"crypto"
	"crypto/elliptic"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// newCosignKey is a key pair in cosign's format: the encrypted private
// key PEM, loaded back, and the public key PEM.
func newCosignKey(t testing.TB, password string) (crypto.Signer, []byte, []byte) {
	t.Helper()
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc([]byte(password)))
	if err != nil {
		t.Fatal(err)
	}
	k, err := LoadPrivateKey(priv, []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	return k, priv, pub
}

func keyMatch(scope string, pems ...[]byte) Match {
	req := Requirement{Type: TypeSigstoreSigned, Identity: SignedIdentity{Type: "matchRepoDigestOrExact"}}
	for _, p := range pems {
		req.Keys = append(req.Keys, Key{Source: "test", PEM: p})
	}
	return Match{Scope: scope, Requirements: []Requirement{req}}
}

// TestVerifyManifest: a cosign v3 bundle by the policy's key over the
// manifest's digest verifies; each other case is a Refusal naming the scope.
func TestVerifyManifest(t *testing.T) {
	ctx := context.Background()
	key, privPEM, pubA := newCosignKey(t, "pw")
	_, _, pubB := newCosignKey(t, "")
	manifest := digest.FromString("manifest")
	other := digest.FromString("another manifest")
	sig, err := SignManifest(ctx, key, manifest)
	if err != nil {
		t.Fatal(err)
	}
	sigOther, _ := SignManifest(ctx, key, other)
	notCosign, _ := SignDSSE(ctx, key, InTotoPayloadType, []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":"`+manifest.Encoded()+`"}}],"predicateType":"https://example.com/other","predicate":{}}`))
	tampered := bytes.Replace(sig, []byte(`"payload":"`), []byte(`"payload":"eyJ`), 1)
	if _, err := LoadPrivateKey(privPEM, []byte("wrong")); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a wrong password: %v", err)
	}
	now := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		name   string
		m      Match
		sigs   [][]byte
		refuse string // "" for accepted
	}{
		{"right key", keyMatch("reg/a", pubA), [][]byte{sig}, ""},
		{"one of two keys", keyMatch("reg/a", pubB, pubA), [][]byte{sig}, ""},
		{"garbage then good", keyMatch("reg/a", pubA), [][]byte{[]byte("{}"), sig}, ""},
		{"other key", keyMatch("reg/a", pubB), [][]byte{sig}, "no signature by a key"},
		{"other manifest", keyMatch("reg/a", pubA), [][]byte{sigOther}, "no signature by a key"},
		{"other predicate", keyMatch("reg/a", pubA), [][]byte{notCosign}, "not a cosign signature"},
		{"tampered", keyMatch("reg/a", pubA), [][]byte{tampered}, "reg/a"},
		{"unsigned", keyMatch("reg/a", pubA), nil, "no signature found"},
		{"unknown member", keyMatch("reg/a", pubA), [][]byte{bytes.Replace(sig, []byte(`{`), []byte(`{"extra":1,`), 1)}, "bundle"},
		{"oversized", keyMatch("reg/a", pubA), [][]byte{append(sig, bytes.Repeat([]byte(" "), MaxBundleBytes)...)}, "more than"},
		{"reject", Match{Scope: "reg/r", Requirements: []Requirement{{Type: TypeReject}}}, [][]byte{sig}, "rejects every artifact"},
		{"accept", Match{Scope: "default", Requirements: []Requirement{{Type: TypeAcceptAnything}}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sigs []Signature
			for i, s := range tc.sigs {
				sigs = append(sigs, Signature{Source: "sig" + string(rune('0'+i)), Raw: s})
			}
			got, err := VerifyManifest(tc.m, manifest, "reg.example/a@"+manifest.String(), sigs, now)
			if tc.refuse == "" {
				if err != nil || len(got) != 1 || got[0].Scope != tc.m.Scope {
					t.Fatalf("%+v %v", got, err)
				}
				if tc.m.Requirements[0].Type == TypeSigstoreSigned && (!strings.HasPrefix(got[0].Key, "sha256:") || got[0].Signature != digest.FromBytes(sig)) {
					t.Fatalf("how it was verified: %+v", got[0])
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || r.Scope != tc.m.Scope || !strings.Contains(err.Error(), tc.refuse) || !errdefs.IsPermissionDenied(err) {
				t.Fatalf("want a refusal of %s with %q, got %v", tc.m.Scope, tc.refuse, err)
			}
		})
	}
}
