package oci

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// TestProviderInResolution plugs the registry provider into the resolution
// runtime: an identity missing locally is fetched from the registry, under
// the identity tag that push wrote, and is fully valid.
func TestProviderInResolution(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 4<<20, 2)
	_, l := imported(t, src)
	identity := l.Identity()
	f := newFakeRegistry(t)
	if _, err := Push(ctx, l, remoteFor(t, f, "models/x:latest"), PushOptions{}); err != nil {
		t.Fatal(err)
	}
	repo := remoteFor(t, f, "models/x")
	root := filepath.Join(t.TempDir(), "node2")
	rt, err := resolve.New(resolve.Config{Mode: resolve.Required, Root: root,
		Providers: []resolve.Provider{&Provider{Repo: repo}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.Resolve(ctx, resolve.Request{Identity: &identity})
	if err != nil {
		t.Fatalf("resolve through the registry: %v", err)
	}
	defer res.Close()
	if res.Report.Outcome != resolve.OutcomeFetched || res.Report.Source != "registry" || res.Lease.ID != l.ID {
		t.Fatalf("report %+v", res.Report)
	}
	d, err := store.Open(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	full, err := d.Lookup(ctx, l.ID, store.FullChecksum)
	if err != nil {
		t.Fatalf("fetched artifact not fully valid: %v", err)
	}
	full.Close()

	// An identity the registry does not hold is a clean miss.
	other := identity
	other.Component = "vision_tower"
	if _, err := (&Provider{Repo: repo}).Producer(ctx, other); !errdefs.IsNotFound(err) {
		t.Fatalf("missing identity: %v, want a clean miss", err)
	}
	// A tag that names another identity is a collision.
	otherHex, _ := other.ID()
	if err := pushManifest(ctx, remoteFor(t, f, "models/x:"+IdentityTag(otherHex)), mustArtifact(t, l).ManifestDesc, mustArtifact(t, l).Manifest); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Provider{Repo: repo}).Producer(ctx, other); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("tag naming another identity: %v, want a conflict", err)
	}
}

func mustArtifact(t *testing.T, l *store.Lease) *Artifact {
	t.Helper()
	a, err := NewArtifact(l.Identity(), l.Index, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var _ artifact.Producer = (*puller)(nil)

// TestLocatorInResolution: a request that knows only the identity digest
// and the pinned reference a pointer names is fetched through the located
// provider; a reference on another host, or not pinned, is refused before
// any connection.
func TestLocatorInResolution(t *testing.T) {
	ctx := context.Background()
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	_, l := imported(t, src)
	f := newFakeRegistry(t)
	rep, err := Push(ctx, l, remoteFor(t, f, "models/x:v1"), PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := f.host() + "/models/x@" + rep.Manifest
	loc := &Locator{Registries: []string{f.host()}, Remote: registry.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json")}}
	rt, err := resolve.New(resolve.Config{Mode: resolve.Required, Root: filepath.Join(t.TempDir(), "node2"),
		Locate: func(ctx context.Context, ref string) (resolve.Provider, error) { return loc.Locate(ctx, ref) }})
	if err != nil {
		t.Fatal(err)
	}
	digest := l.ID
	res, err := rt.Resolve(ctx, resolve.Request{ID: digest, Artifact: pinned})
	if err != nil || res.Report.Outcome != resolve.OutcomeFetched || res.Lease.ID != l.ID {
		t.Fatalf("resolve by digest: %v %+v", err, res.Report)
	}
	res.Close()
	for _, ref := range []string{"other.example:5000/models/x@" + rep.Manifest, f.host() + "/models/x:v1"} {
		if _, err := loc.Locate(ctx, ref); err == nil {
			t.Fatalf("%s was located", ref)
		}
	}
	// The pinned artifact under another identity digest is a collision.
	p, _ := loc.Locate(ctx, pinned)
	if _, _, err := p.ProducerForID(ctx, artifact.MustParseID("sha256:"+zeros)); !errdefs.IsConflict(err) {
		t.Fatalf("wrong digest: %v", err)
	}
}
