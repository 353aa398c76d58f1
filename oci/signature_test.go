package oci

import (
	"context"
	"crypto/elliptic"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/weightsnap/weightsnap/trust"
)

// TestSignedPush: a push with a sign key attaches a cosign v3 bundle as a
// referrer (the fake registry has no referrers API: the referrers tag
// schema), which discovery finds and the key verifies; a referrer about
// another manifest, and a signature by the right key over another
// manifest, are each refused.
func TestSignedPush(t *testing.T) {
	ctx := context.Background()
	privPEM, pubPEM, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc([]byte("pw")))
	if err != nil {
		t.Fatal(err)
	}
	key, err := trust.LoadPrivateKey(privPEM, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	_, otherPub, _ := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc(nil))
	match := func(pub []byte) trust.Match {
		return trust.Match{Scope: "models/x", Requirements: []trust.Requirement{{Type: trust.TypeSigstoreSigned,
			Keys: []trust.Key{{Source: "k.pub", PEM: pub}}, Identity: trust.SignedIdentity{Type: "matchRepoDigestOrExact"}}}}
	}
	_, src := checkpoint(t, 1<<20, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	r := remoteFor(t, f, "models/x:v1")
	rep, err := Push(ctx, l, r, PushOptions{SignKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Signature == "" {
		t.Fatal("no signature in the report")
	}
	desc, _, err := r.FetchManifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sigs, err := FindSignatures(ctx, r, desc)
	if err != nil || len(sigs) != 1 {
		t.Fatalf("%d signatures, %v", len(sigs), err)
	}
	if _, err := trust.VerifyManifest(match(pubPEM), desc.Digest, sigs, now); err != nil {
		t.Fatal(err)
	}
	if _, err := trust.VerifyManifest(match(otherPub), desc.Digest, sigs, now); !errdefs.IsPermissionDenied(err) {
		t.Fatalf("another key: %v", err)
	}
	// The right key over another manifest, attached to this one.
	other := digest.FromString("another manifest")
	b, err := trust.SignManifest(ctx, key, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AttachSignature(ctx, r, desc, b, trust.CosignSignPredicate); err != nil {
		t.Fatal(err)
	}
	sigs, err = FindSignatures(ctx, r, desc)
	if err != nil || len(sigs) != 2 {
		t.Fatalf("%d signatures, %v", len(sigs), err)
	}
	if _, err := trust.VerifyManifest(match(pubPEM), desc.Digest, sigs[1:], now); !errdefs.IsPermissionDenied(err) {
		t.Fatalf("a signature over another manifest: %v", err)
	}
	// A referrer whose subject is another manifest, listed in this one's
	// referrers index by a registry that lies.
	r2 := remoteFor(t, f, "models/x:v2")
	elsewhere := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("x"), Size: 1}
	if _, err := AttachSignature(ctx, r2, elsewhere, b, trust.CosignSignPredicate); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	tag := strings.Replace(desc.Digest.String(), ":", "-", 1)
	idx := f.manifests["models/x"][tag]
	elsewhereTag := strings.Replace(elsewhere.Digest.String(), ":", "-", 1)
	lying, ok := f.manifests["models/x"][elsewhereTag]
	if ok {
		f.manifests["models/x"][tag] = lying
	}
	f.mu.Unlock()
	if !ok || idx.raw == nil {
		t.Fatalf("referrers index tags: %v %v", ok, idx.raw == nil)
	}
	_, err = FindSignatures(ctx, r, desc)
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "its subject is not") {
		t.Fatalf("a referrer of another manifest: %v", err)
	}
}
