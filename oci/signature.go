package oci

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/trust"
	"oras.land/oras-go/v2/registry/remote"
)

// Media types and annotations of a cosign v3 signature referrer. cosign's
// WriteAttestationNewBundleFormat writes this form.
const (
	MediaTypeSigstoreBundle = "application/vnd.dev.sigstore.bundle.v0.3+json"
	AnnotationBundleContent = "dev.sigstore.bundle.content"
	AnnotationPredicateType = "dev.sigstore.bundle.predicateType"
	// MaxReferrers bounds the referrers of one manifest that are looked at.
	MaxReferrers = 256
)

// emptyJSON is the OCI empty config blob, "{}".
var emptyJSON = []byte("{}")

// AttachSignature pushes a sigstore bundle as a referrer of subject. The referrer is an image
// manifest of artifact type MediaTypeSigstoreBundle whose one layer is the bundle. That is the form
// cosign v3 writes and `cosign verify` reads. A registry without the referrers API gets the
// referrers tag schema, which oras-go keeps. That schema is a tag sha256-<hex> on an index of the
// referrers.
func AttachSignature(ctx context.Context, r *registry.Remote, subject ocispec.Descriptor, bundle []byte, predicateType string) (ocispec.Descriptor, error) {
	cfg := ocispec.Descriptor{MediaType: ocispec.MediaTypeEmptyJSON, Digest: digest.FromBytes(emptyJSON), Size: int64(len(emptyJSON))}
	layer := ocispec.Descriptor{MediaType: MediaTypeSigstoreBundle, Digest: digest.FromBytes(bundle), Size: int64(len(bundle))}
	for _, b := range []struct {
		desc ocispec.Descriptor
		data []byte
	}{{cfg, emptyJSON}, {layer, bundle}} {
		if err := pushSmall(ctx, r, b.desc, b.data); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: MediaTypeSigstoreBundle,
		Config:       cfg,
		Layers:       []ocispec.Descriptor{layer},
		Subject:      &ocispec.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations: map[string]string{
			"org.opencontainers.image.created": time.Now().UTC().Format(time.RFC3339),
			AnnotationBundleContent:            "dsse-envelope",
			AnnotationPredicateType:            predicateType,
		},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: MediaTypeSigstoreBundle, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	// A registry that refuses deletes keeps the previous referrers index
	// as a dangling manifest: the new one is tagged all the same.
	var re *remote.ReferrersError
	if err := r.Repo.Push(ctx, desc, bytes.NewReader(raw)); err != nil && !(errors.As(err, &re) && re.IsReferrersIndexDelete()) {
		return ocispec.Descriptor{}, fmt.Errorf("push signature referrer of %s: %w", subject.Digest, registry.Classify(err))
	}
	return desc, nil
}

// pushSmall uploads a small blob unless the repository holds it.
func pushSmall(ctx context.Context, r *registry.Remote, desc ocispec.Descriptor, data []byte) error {
	ok, err := r.Repo.Blobs().Exists(ctx, desc)
	if err == nil && ok {
		return nil
	}
	if err := r.Repo.Blobs().Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return fmt.Errorf("push %s: %w", desc.Digest, registry.Classify(err))
	}
	return nil
}

// FindSignatures lists the signatures attached to subject: sigstore bundles, then cosign v2's.
// Bundles are referrers, found by the referrers API or else the referrers tag schema. They are
// cosign v3 signatures and OMS bundles alike. cosign v2's signatures are under the tag
// sha256-<hex>.sig. Each is read bounded and checked. Its referrer manifest must name subject as
// its subject and hold one bundle layer. Referrers of other artifact types are skipped. A malformed
// bundle referrer is an error, so a registry cannot hide a signature behind a broken one.
func FindSignatures(ctx context.Context, r *registry.Remote, subject ocispec.Descriptor) ([]trust.Signature, error) {
	refs, err := bundleReferrers(ctx, r, subject)
	if err != nil {
		return nil, err
	}
	var sigs []trust.Signature
	for _, d := range refs {
		s, err := readSignatureReferrer(ctx, r, subject, d)
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, s)
	}
	v2, err := findV2Signatures(ctx, r, subject)
	if err != nil {
		return nil, err
	}
	return append(sigs, v2...), nil
}

// bundleReferrers lists the sigstore bundle referrers of subject, at most
// MaxReferrers.
func bundleReferrers(ctx context.Context, r *registry.Remote, subject ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	var refs []ocispec.Descriptor
	err := r.Repo.Referrers(ctx, subject, "", func(page []ocispec.Descriptor) error {
		for _, d := range page {
			if d.ArtifactType != MediaTypeSigstoreBundle {
				continue
			}
			if len(refs) >= MaxReferrers {
				return fmt.Errorf("more than %d signature referrers of %s: %w", MaxReferrers, subject.Digest, errdefs.ErrInvalidArgument)
			}
			refs = append(refs, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("referrers of %s: %w", subject.Digest, registry.Classify(err))
	}
	return refs, nil
}

// signOnce attaches key's signature of subject, used by ref (its
// repository), unless one is attached already: it returns the referrer
// that holds it, so a push signed again attaches nothing more.
func signOnce(ctx context.Context, r *registry.Remote, subject ocispec.Descriptor, ref string, key crypto.Signer) (ocispec.Descriptor, error) {
	refs, err := bundleReferrers(ctx, r, subject)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	for _, d := range refs {
		s, err := readSignatureReferrer(ctx, r, subject, d)
		if err == nil && trust.SignedBy(key.Public(), subject.Digest, ref, s) {
			return d, nil
		}
	}
	b, err := trust.SignManifest(ctx, key, subject.Digest)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return AttachSignature(ctx, r, subject, b, trust.CosignSignPredicate)
}

// readSignatureReferrer reads one bundle referrer and checks that it is
// about subject.
func readSignatureReferrer(ctx context.Context, r *registry.Remote, subject, d ocispec.Descriptor) (trust.Signature, error) {
	what := "signature referrer " + d.Digest.String()
	if d.MediaType != ocispec.MediaTypeImageManifest {
		return trust.Signature{}, fmt.Errorf("%s: media type %q: %w", what, d.MediaType, errdefs.ErrInvalidArgument)
	}
	raw, err := r.FetchSmall(ctx, d, what, 64<<10)
	if err != nil {
		return trust.Signature{}, err
	}
	var m ocispec.Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return trust.Signature{}, fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}
	switch {
	case m.Subject == nil || m.Subject.Digest != subject.Digest:
		return trust.Signature{}, fmt.Errorf("%s: its subject is not %s: %w", what, subject.Digest, errdefs.ErrInvalidArgument)
	case len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeSigstoreBundle:
		return trust.Signature{}, fmt.Errorf("%s: want one layer of %s: %w", what, MediaTypeSigstoreBundle, errdefs.ErrInvalidArgument)
	}
	bundle, err := r.FetchSmall(ctx, m.Layers[0], what+" bundle", trust.MaxBundleBytes)
	if err != nil {
		return trust.Signature{}, err
	}
	return trust.Signature{Source: what, Raw: bundle}, nil
}
