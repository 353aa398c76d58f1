package oci

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/trust"
)

// PolicyMatch is the policy's requirements for the remote's reference. They are the most specific
// docker scope of its registry, repository and tag or digest.
func PolicyMatch(p *trust.Policy, r *registry.Remote) (trust.Match, error) {
	named, err := pulledRef(r, "")
	if err != nil {
		return trust.Match{}, err
	}
	return p.For(named), nil
}

// pulledRef is the reference the remote's artifact is pulled by: its tag
// or digest, else the digest of the manifest resolved (dg, "" none).
func pulledRef(r *registry.Remote, dg digest.Digest) (reference.Named, error) {
	named, err := reference.ParseNamed(r.Name())
	if err != nil {
		return nil, fmt.Errorf("reference %s: %v: %w", r, err, errdefs.ErrInvalidArgument)
	}
	switch ref := r.Ref.Reference; {
	case ref != "" && r.Ref.ValidateReferenceAsDigest() == nil:
		named, err = reference.WithDigest(named, digest.Digest(ref))
	case ref != "":
		named, err = reference.WithTag(named, ref)
	case dg != "":
		named, err = reference.WithDigest(named, dg)
	}
	if err != nil {
		return nil, fmt.Errorf("reference %s: %v: %w", r, err, errdefs.ErrInvalidArgument)
	}
	return named, nil
}

// VerifyManifest checks the manifest desc of the remote's repository against the policy. It finds
// the signatures attached to the manifest only where the scope requires them. It says how each
// requirement was met, or refuses with a *trust.Refusal naming the scope.
func VerifyManifest(ctx context.Context, p *trust.Policy, r *registry.Remote, desc ocispec.Descriptor, now time.Time) ([]trust.Verified, error) {
	v, _, err := verifyManifest(ctx, p, r, desc, now)
	return v, err
}

// verifyManifest is VerifyManifest, with the signatures it found.
func verifyManifest(ctx context.Context, p *trust.Policy, r *registry.Remote, desc ocispec.Descriptor, now time.Time) ([]trust.Verified, []trust.Signature, error) {
	named, err := pulledRef(r, desc.Digest)
	if err != nil {
		return nil, nil, err
	}
	m := p.For(named)
	var sigs []trust.Signature
	for _, req := range m.Requirements {
		if req.Type == trust.TypeSigstoreSigned {
			if sigs, err = FindSignatures(ctx, r, desc); err != nil {
				return nil, nil, &trust.Refusal{Scope: m.Scope, Reason: err.Error()}
			}
			break
		}
	}
	v, err := trust.VerifyManifest(m, desc.Digest, named.String(), sigs, now)
	return v, sigs, err
}

// current is the policy s holds (nil: none, no check).
func current(s trust.Source) *trust.Policy {
	if s == nil {
		return nil
	}
	return s.Current()
}

// verifyResolved checks a resolved manifest against the policy (nil: no
// check, no record) and returns the record of how it was met, to keep
// beside the artifact (Attested).
func verifyResolved(ctx context.Context, p *trust.Policy, r *registry.Remote, res *Resolved) (*trust.Record, error) {
	if p == nil {
		return nil, nil
	}
	if digest.FromBytes(res.Raw) != res.Desc.Digest {
		return nil, fmt.Errorf("manifest of %s: its bytes are not %s: %w", r, res.Desc.Digest, errdefs.ErrDataLoss)
	}
	v, sigs, err := verifyManifest(ctx, p, r, res.Desc, time.Now().UTC())
	if err != nil {
		return nil, fmt.Errorf("artifact %s@%s: %w", r.Name(), res.Desc.Digest, err)
	}
	rec := trust.NewRecord(r.Name()+"@"+res.Desc.Digest.String(), res.Raw, sigs, v)
	return &rec, nil
}
