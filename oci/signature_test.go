package oci

import (
	"bytes"
	"context"
	"crypto"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/trust"
)

// TestSignedPush: a push with a sign key attaches a cosign v3 bundle as a
// referrer (the fake registry has no referrers API: the referrers tag
// schema), which discovery finds and the key verifies; a referrer about
// another manifest, and a signature by the right key over another
// manifest, are each refused.
func TestSignedPush(t *testing.T) {
	ctx := context.Background()
	key, pubPEM := signKey(t)
	_, otherPub := signKey(t)
	match := func(pub []byte) trust.Match {
		return trust.Match{Scope: "models/x", Requirements: []trust.Requirement{{Type: trust.TypeSigstoreSigned,
			Keys: []trust.Key{{Source: "k.pub", PEM: pub}}, Identity: trust.SignedIdentity{Type: "matchRepoDigestOrExact"}}}}
	}
	_, src := storetest.Checkpoint(t, 1<<20, 1)
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
	if _, err := trust.VerifyManifest(match(pubPEM), desc.Digest, r.Name(), sigs, now); err != nil {
		t.Fatal(err)
	}
	if _, err := trust.VerifyManifest(match(otherPub), desc.Digest, r.Name(), sigs, now); !errdefs.IsPermissionDenied(err) {
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
	if _, err := trust.VerifyManifest(match(pubPEM), desc.Digest, r.Name(), sigs[1:], now); !errdefs.IsPermissionDenied(err) {
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

// TestSignedPushOnce: pushing the same artifact again with the same key
// reuses the signature attached; another key attaches its own.
func TestSignedPushOnce(t *testing.T) {
	ctx := context.Background()
	key, _ := signKey(t)
	other, _ := signKey(t)
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	_, l := imported(t, src)
	r := remoteFor(t, newFakeRegistry(t), "models/x:v1")
	first := ""
	for _, tc := range []struct {
		name string
		key  crypto.Signer
		sigs int
		same bool // the report names the first push's signature
	}{
		{"first push", key, 1, true},
		{"same key again", key, 1, true},
		{"same key a third time", key, 1, true},
		{"another key", other, 2, false},
	} {
		rep, err := Push(ctx, l, r, PushOptions{SignKey: tc.key})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if first == "" {
			first = rep.Signature
		}
		desc, _, err := r.FetchManifest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sigs, err := FindSignatures(ctx, r, desc)
		if err != nil || len(sigs) != tc.sigs || (rep.Signature == first) != tc.same {
			t.Errorf("%s: %d signatures (%v), signature %s (first %s); want %d", tc.name, len(sigs), err, rep.Signature, first, tc.sigs)
		}
	}
}

// TestPullEnforcesPolicy: with a policy that requires the key for one
// repository, its artifact signed with a cosign v3 bundle pulls by
// digest and says how it was verified, and is refused by tag (a bundle
// names no tag);
// the same artifact unsigned in that scope is refused naming the scope
// and the store holds nothing; another repository pulls unsigned. image
// build checks its weights the same way.
func TestPullEnforcesPolicy(t *testing.T) {
	ctx := context.Background()
	key, pubPEM := signKey(t)
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	signedTag := remoteFor(t, f, "secure/signed:v1")
	if _, err := Push(ctx, l, signedTag, PushOptions{SignKey: key}); err != nil {
		t.Fatal(err)
	}
	signedDesc, _, err := signedTag.FetchManifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	signed := "secure/signed@" + signedDesc.Digest.String()
	for _, ref := range []string{"secure/unsigned:v1", "open/x:v1"} {
		if _, err := Push(ctx, l, remoteFor(t, f, ref), PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	doc := `{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {"` + f.host() + `/secure": [
		{"type": "sigstoreSigned", "keyData": "` + base64.StdEncoding.EncodeToString(pubPEM) + `"}]}}}`
	p, err := trust.ParsePolicy("policy.json", []byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := storetest.Open(t)
	_, _, err = Pull(ctx, d, remoteFor(t, f, "secure/unsigned:v1"), PullOptions{Policy: p})
	var refusal *trust.Refusal
	if !errors.As(err, &refusal) || refusal.Scope != f.host()+"/secure" || !strings.Contains(err.Error(), "no signature found") {
		t.Fatalf("unsigned in a signed scope: %v", err)
	}
	if infos, err := d.List(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("the store holds %d artifacts after a refusal (%v)", len(infos), err)
	}
	if _, _, err := Pull(ctx, d, remoteFor(t, f, "secure/signed:v1"), PullOptions{Policy: p}); !errors.As(err, &refusal) || !strings.Contains(err.Error(), "pull by digest") {
		t.Fatalf("a bundle-signed artifact pulled by tag: %v", err)
	}
	sl, rep, err := Pull(ctx, d, remoteFor(t, f, signed), PullOptions{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	sl.Close()
	if len(rep.Verified) != 1 || rep.Verified[0].Type != trust.TypeSigstoreSigned || rep.Verified[0].Key == "" || rep.Unverified {
		t.Fatalf("how it was verified: %+v", rep.Verified)
	}
	// The store keeps how: the signed manifest, its reference, the bundle.
	if recs, err := Records(d, rep.ID); err != nil || len(recs) != 1 || !recs[0].Signed() || recs[0].Digest().String() != rep.Manifest ||
		recs[0].Verified[0].Key != rep.Verified[0].Key {
		t.Fatalf("kept record: %+v %v", recs, err)
	}
	// The store now holds that artifact: the unsigned reference is still
	// refused, before any store hit.
	if _, _, err := Pull(ctx, d, remoteFor(t, f, "secure/unsigned:v1"), PullOptions{Policy: p}); !errors.As(err, &refusal) {
		t.Fatalf("unsigned, held in the store: %v", err)
	}
	// image build checks each --weights as a pull does, before it pushes anything.
	build := func(weights string) (*ImageReport, error) {
		return BuildImage(ctx, remoteFor(t, f, "apps/x:v1"), ImageOptions{Base: Scratch, Policy: p, Weights: []WeightMount{{Ref: f.host() + "/" + weights, Target: "/models/x"}}})
	}
	if _, err := build("secure/unsigned:v1"); !errors.As(err, &refusal) || refusal.Scope != f.host()+"/secure" {
		t.Fatalf("image build over an unsigned artifact of a signed scope: %v", err)
	}
	f.mu.Lock()
	pushed := len(f.manifests["apps/x"])
	f.mu.Unlock()
	if pushed != 0 {
		t.Fatal("a refused image build pushed a manifest")
	}
	if ir, err := build(signed); err != nil || len(ir.Verified) != 1 || ir.Verified[0][0].Type != trust.TypeSigstoreSigned {
		t.Fatalf("image build over the signed artifact: %+v %v", ir, err)
	}
	ol, rep, err := Pull(ctx, d, remoteFor(t, f, "open/x:v1"), PullOptions{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	ol.Close()
	if len(rep.Verified) != 1 || rep.Verified[0].Type != trust.TypeAcceptAnything || rep.Verified[0].Scope != "default" {
		t.Fatalf("other repository: %+v", rep.Verified)
	}
}

// pushV2Signature files a cosign v2 signature image for subject: one
// simple-signing layer with payload, signed by key.
func pushV2Signature(t *testing.T, r *registry.Remote, subject ocispec.Descriptor, key crypto.Signer, payload []byte) {
	t.Helper()
	pushV2Signatures(t, r, subject, []crypto.Signer{key}, [][]byte{payload})
}

// pushV2Signatures files a cosign v2 signature image for subject, as
// cosign writes it: one simple-signing layer per payload, signed by the
// key of the same index.
func pushV2Signatures(t *testing.T, r *registry.Remote, subject ocispec.Descriptor, keys []crypto.Signer, payloads [][]byte) {
	t.Helper()
	ctx := context.Background()
	cfg := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(emptyJSON), Size: 2}
	if err := pushSmall(ctx, r, cfg, emptyJSON); err != nil {
		t.Fatal(err)
	}
	var layers []ocispec.Descriptor
	for i, payload := range payloads {
		sum := sha256.Sum256(payload)
		sig, err := keys[i].Sign(rand.Reader, sum[:], crypto.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		layer := ocispec.Descriptor{MediaType: MediaTypeCosignSimpleSigning, Digest: digest.FromBytes(payload), Size: int64(len(payload)),
			Annotations: map[string]string{AnnotationCosignSignature: base64.StdEncoding.EncodeToString(sig)}}
		if err := pushSmall(ctx, r, layer, payload); err != nil {
			t.Fatal(err)
		}
		layers = append(layers, layer)
	}
	raw, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: layers})
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	if err := r.Repo.PushReference(ctx, desc, bytes.NewReader(raw), cosignV2Tag(subject)); err != nil {
		t.Fatal(err)
	}
}

// TestCosignV2Signature: cosign v2's sha256-<hex>.sig tag is found and
// verified with the key under the default signedIdentity; a payload over
// another manifest, naming another repository, or naming only the
// repository is refused.
func TestCosignV2Signature(t *testing.T) {
	ctx := context.Background()
	privPEM, pubPEM, _ := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc(nil))
	key, err := trust.LoadPrivateKey(privPEM, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	payload := func(ref, d string) []byte {
		return []byte(`{"critical":{"identity":{"docker-reference":"` + ref + `"},"image":{"docker-manifest-digest":"` + d + `"},"type":"cosign container image signature"},"optional":null}`)
	}
	match := trust.Match{Scope: "s", Requirements: []trust.Requirement{{Type: trust.TypeSigstoreSigned,
		Keys: []trust.Key{{Source: "k.pub", PEM: pubPEM}}, Identity: trust.SignedIdentity{Type: "matchRepoDigestOrExact"}}}}
	for _, tc := range []struct {
		repo, names, digest string // digest "" is the manifest's
		want                string // "" for verified
	}{
		{"v2/good", "v2/good:v1", "", ""},
		{"v2/other-digest", "v2/other-digest:v1", digest.FromString("x").String(), "signs manifest"},
		{"v2/other-repo", "v2/elsewhere:v1", "", "names"},
		{"v2/repo-only", "v2/repo-only", "", "names"},
	} {
		r := remoteFor(t, f, tc.repo+":v1")
		if _, err := Push(ctx, l, r, PushOptions{}); err != nil {
			t.Fatal(err)
		}
		desc, _, err := r.FetchManifest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := tc.digest
		if d == "" {
			d = desc.Digest.String()
		}
		pushV2Signature(t, r, desc, key, payload(f.host()+"/"+tc.names, d))
		sigs, err := FindSignatures(ctx, r, desc)
		if err != nil || len(sigs) != 1 || sigs[0].Payload == nil {
			t.Fatalf("%s: %d signatures, %v", tc.repo, len(sigs), err)
		}
		_, err = trust.VerifyManifest(match, desc.Digest, r.Name()+":v1", sigs, time.Now())
		if tc.want == "" {
			if err != nil {
				t.Fatalf("%s: %v", tc.repo, err)
			}
			continue
		}
		if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: want a refusal with %q, got %v", tc.repo, tc.want, err)
		}
	}
}

// signKey is a new cosign-format signing key and its public key (PEM).
func signKey(t *testing.T) (crypto.Signer, []byte) {
	t.Helper()
	privPEM, pubPEM, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc([]byte("pw")))
	if err != nil {
		t.Fatal(err)
	}
	key, err := trust.LoadPrivateKey(privPEM, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	return key, pubPEM
}
