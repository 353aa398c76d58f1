package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/trust"
)

// Media type and annotation of cosign v2's signature image, one layer per signature. The image is
// tagged sha256-<hex>.sig in the signed manifest's repository.
const (
	MediaTypeCosignSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	AnnotationCosignSignature    = "dev.cosignproject.cosign/signature"
)

// cosignV2Tag is the tag cosign v2 files a manifest's signatures under.
func cosignV2Tag(subject ocispec.Descriptor) string {
	return strings.Replace(subject.Digest.String(), ":", "-", 1) + ".sig"
}

// findV2Signatures reads cosign v2's signature image of subject, if the
// repository has one: each simple-signing layer with its signature
// annotation, bounded. No such tag is no signature.
func findV2Signatures(ctx context.Context, r *registry.Remote, subject ocispec.Descriptor) ([]trust.Signature, error) {
	tag := cosignV2Tag(subject)
	sr, err := r.Sibling(r.Name() + ":" + tag)
	if err != nil {
		return nil, err
	}
	_, raw, err := sr.FetchManifest(ctx)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cosign v2 signature tag %s: %w", tag, err)
	}
	var m ocispec.Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("cosign v2 signature tag %s: %v: %w", tag, err, errdefs.ErrInvalidArgument)
	}
	if len(m.Layers) > MaxReferrers {
		return nil, fmt.Errorf("cosign v2 signature tag %s: %d layers, more than %d: %w", tag, len(m.Layers), MaxReferrers, errdefs.ErrInvalidArgument)
	}
	var sigs []trust.Signature
	for i, l := range m.Layers {
		if l.MediaType != MediaTypeCosignSimpleSigning {
			continue
		}
		what := fmt.Sprintf("cosign v2 signature %s layer %d", tag, i)
		payload, err := sr.FetchSmall(ctx, l, what, trust.MaxSimplePayloadBytes)
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, trust.Signature{Source: what, Payload: payload, Sig: l.Annotations[AnnotationCosignSignature]})
	}
	return sigs, nil
}
