package oci

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/pointer"
	"github.com/weightsnap/weightsnap/trust"
)

// IdentityTag is the tag Push also gives an artifact: "ws-" and the identity's hex. With it a
// registry can be asked for an exact identity.
func IdentityTag(id artifact.ID) string { return "ws-" + id.Hex() }

// Provider is resolution's registry source: a repository whose artifacts are tagged by identity.
// The tags are IdentityTag's. It implements resolve.Provider without importing it.
type Provider struct {
	// Repo is the repository, "host/repo", opened with its client options.
	Repo *registry.Remote
	// Options tunes the pulls it produces.
	Options PullOptions
}

// Name implements resolve.Provider.
func (p *Provider) Name() string { return "registry" }

// Producer implements resolve.Provider. It fetches the manifest tagged with the identity, and its
// index layer. It returns the producer that pulls the payload. A missing tag is a clean miss; a
// manifest that names another identity is a collision.
func (p *Provider) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	id, err := identity.ID()
	if err != nil {
		return nil, err
	}
	r, err := p.Repo.Sibling(p.Repo.Name() + ":" + IdentityTag(id))
	if err != nil {
		return nil, err
	}
	_, prod, err := producerFor(ctx, r, id, p.Options)
	return prod, err // errdefs.ErrNotFound for a missing tag: a clean miss
}

// producerFor fetches the remote's manifest and index layer and returns the
// identity it names and the producer that pulls it: a collision unless it
// is a weightsnap artifact of the identity digest wanted, or a foreign
// artifact whose planned identity (PlanArtifact: what the CRI image service
// made its weights-only image of) is that digest.
func producerFor(ctx context.Context, r *registry.Remote, want artifact.ID, o PullOptions) (artifact.Identity, artifact.Producer, error) {
	res, err := resolveManifest(ctx, r, "")
	if err != nil {
		return artifact.Identity{}, nil, err
	}
	// The policy first: a refused artifact costs no index layer, no
	// payload byte, and leaves nothing in the store.
	rec, err := verifyResolved(ctx, current(o.Policy), r, res)
	if err != nil {
		return artifact.Identity{}, nil, err
	}
	m := res.Manifest
	got, ok := annotatedIdentity(m)
	if _, weightsnap := IndexLayer(m); !weightsnap && IsArtifact(m) {
		plan, err := PlanArtifact(ctx, r, res)
		if err != nil {
			return artifact.Identity{}, nil, err
		}
		if d, _ := plan.Identity.ID(); d == want {
			p := newPuller(r, plan, o)
			p.record = rec
			return plan.Identity, p, nil
		}
	}
	if d, _ := got.ID(); !ok || d != want {
		return artifact.Identity{}, nil, fmt.Errorf("%s is not the weightsnap artifact of identity %s: %w", r, want, errdefs.ErrConflict)
	}
	plan, err := planRemote(ctx, r, m, o.Import)
	if err != nil {
		return artifact.Identity{}, nil, err
	}
	p := newPuller(r, plan, o)
	p.record = rec
	return got, p, nil
}

// ArtifactProvider is the registry source of one artifact reference pinned by digest. The reference
// is the artifact a weight image's pointer names. It implements resolve.Provider and
// resolve.IDProvider without importing resolve.
type ArtifactProvider struct {
	// Remote is opened at the pinned reference.
	Remote *registry.Remote
	// Options tunes the pull it produces.
	Options PullOptions
}

// Name implements resolve.Provider.
func (p *ArtifactProvider) Name() string { return "registry" }

// Producer implements resolve.Provider.
func (p *ArtifactProvider) Producer(ctx context.Context, identity artifact.Identity) (artifact.Producer, error) {
	id, err := identity.ID()
	if err != nil {
		return nil, err
	}
	_, prod, err := producerFor(ctx, p.Remote, id, p.Options)
	return prod, err
}

// ProducerForID implements resolve.IDProvider.
func (p *ArtifactProvider) ProducerForID(ctx context.Context, id artifact.ID) (artifact.Identity, artifact.Producer, error) {
	return producerFor(ctx, p.Remote, id, p.Options)
}

// Locator opens the providers of artifact references pinned by digest, on configured hosts only.
// The references come from images. So a host outside Registries is refused before any connection.
type Locator struct {
	Registries []string
	// Policy, if set, is checked against each located artifact's manifest before anything of it is
	// fetched. It becomes the provider's PullOptions.Policy.
	Policy trust.Source
	// ConfigFile names the file whose [resolve] registries Registries are. The error that refuses a
	// host names it; "" when Registries are the defaults.
	ConfigFile string
	Remote     registry.Options
	Pull       PullOptions
}

// Locate returns the provider of ref. ref must be pinned by a sha256 digest and name an allowed
// host.
func (l *Locator) Locate(ctx context.Context, ref string) (*ArtifactProvider, error) {
	if err := pointer.CheckPinnedRef(ref); err != nil {
		return nil, fmt.Errorf("artifact %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	host := pointer.Host(pointer.Pointer{Artifact: ref})
	if !AllowedHost(l.Registries, host) {
		file := "the configuration file"
		if l.ConfigFile != "" {
			file = l.ConfigFile
		}
		return nil, fmt.Errorf("artifact %s: %s is not a configured registry: add it to [resolve] registries in %s (now [%s]) to let weight images pull from it: %w",
			ref, host, file, strings.Join(l.Registries, ", "), errdefs.ErrPermissionDenied)
	}
	r, err := registry.New(ctx, ref, l.Remote)
	if err != nil {
		return nil, err
	}
	o := l.Pull
	if l.Policy != nil {
		o.Policy = l.Policy
	}
	return &ArtifactProvider{Remote: r, Options: o}, nil
}

// AllowedHost says whether host is one of hosts (case-insensitive).
func AllowedHost(hosts []string, host string) bool {
	return host != "" && slices.ContainsFunc(hosts, func(h string) bool { return strings.EqualFold(h, host) })
}

// tagIdentity files a pushed manifest under its identity tag too.
func tagIdentity(ctx context.Context, r *registry.Remote, a *Artifact) error {
	tagged, err := r.Sibling(r.Name() + ":" + IdentityTag(a.ID))
	if err != nil {
		return err
	}
	return pushManifest(ctx, tagged, a.ManifestDesc, a.Manifest)
}
