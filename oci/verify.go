package oci

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/trust"
)

// PolicyMatch is the policy's requirements for the remote's reference:
// the most specific docker scope of its registry, repository and tag.
func PolicyMatch(p *trust.Policy, r *registry.Remote) (trust.Match, error) {
	named, err := reference.ParseNamed(r.Name())
	if err != nil {
		return trust.Match{}, fmt.Errorf("reference %s: %v: %w", r, err, errdefs.ErrInvalidArgument)
	}
	if tag := r.Ref.Reference; tag != "" && r.Ref.ValidateReferenceAsDigest() != nil {
		if named, err = reference.WithTag(named, tag); err != nil {
			return trust.Match{}, fmt.Errorf("reference %s: %v: %w", r, err, errdefs.ErrInvalidArgument)
		}
	}
	return p.For(named), nil
}

// VerifyManifest checks the manifest desc of the remote's repository
// against the policy: it finds the signatures attached to it only where
// the scope requires them, and says how each requirement was met, or
// refuses (a *trust.Refusal naming the scope).
func VerifyManifest(ctx context.Context, p *trust.Policy, r *registry.Remote, desc ocispec.Descriptor, now time.Time) ([]trust.Verified, error) {
	m, err := PolicyMatch(p, r)
	if err != nil {
		return nil, err
	}
	var sigs []trust.Signature
	for _, req := range m.Requirements {
		if req.Type == trust.TypeSigstoreSigned {
			if sigs, err = FindSignatures(ctx, r, desc); err != nil {
				return nil, &trust.Refusal{Scope: m.Scope, Reason: err.Error()}
			}
			break
		}
	}
	return trust.VerifyManifest(m, desc.Digest, r.Name(), sigs, now)
}
