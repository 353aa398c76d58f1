package oci

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

// IdentityTag is the tag Push also gives an artifact in its repository, so a
// registry can be asked for an exact identity: "ws-" and the identity hex.
func IdentityTag(identityHex string) string { return "ws-" + identityHex }

// Provider is the registry source of resolution: a repository whose
// artifacts are tagged by identity (IdentityTag). It implements
// resolve.Provider without importing it.
type Provider struct {
	// Repo is the repository, "host/repo", opened with its client options.
	Repo *Remote
	// Options tunes the pulls it produces.
	Options PullOptions
}

// Name implements resolve.Provider.
func (p *Provider) Name() string { return "registry" }

// Producer implements resolve.Provider: it fetches the manifest tagged with
// the identity and its small index layer, and returns the producer that
// pulls the payload. A missing tag is a clean miss; a manifest that names
// another identity is a collision.
func (p *Provider) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	hex, err := identity.Hex()
	if err != nil {
		return nil, err
	}
	r, err := p.Repo.Sibling(p.Repo.Name() + ":" + IdentityTag(hex))
	if err != nil {
		return nil, err
	}
	_, plan, err := Resolve(ctx, r, p.Options.Import)
	if err != nil {
		return nil, err // errdefs.ErrNotFound for a missing tag: a clean miss
	}
	if gotHex, _ := plan.Identity.Hex(); plan.Kind != KindWeightsnap || gotHex != hex {
		return nil, fmt.Errorf("%s names another identity than %s: %w", r, hex[:12], errdefs.ErrConflict)
	}
	return &puller{r: r, plan: plan, o: p.Options, open: map[*fileTask]struct{}{}}, nil
}

// tagIdentity files a pushed manifest under its identity tag too.
func tagIdentity(ctx context.Context, r *Remote, a *Artifact) error {
	tagged, err := r.Sibling(r.Name() + ":" + IdentityTag(a.IdentityDigest[len("sha256:"):]))
	if err != nil {
		return err
	}
	return pushManifest(ctx, tagged, a.ManifestDesc, a.Manifest)
}
