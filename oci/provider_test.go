package oci

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// TestProviderInResolution plugs the registry provider into the resolution
// runtime: an identity missing locally is fetched from the registry, under
// the identity tag that push wrote, and is fully valid.
func TestProviderInResolution(t *testing.T) {
	ctx := context.Background()
	_, src := checkpoint(t, 4<<20, 2)
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
	otherHex, _ := other.Hex()
	if err := pushManifest(ctx, remoteFor(t, f, "models/x:"+IdentityTag(otherHex)), mustArtifact(t, l).ManifestDesc, mustArtifact(t, l).Manifest); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Provider{Repo: repo}).Producer(ctx, other); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("tag naming another identity: %v, want a conflict", err)
	}
}

func mustArtifact(t *testing.T, l *store.Lease) *Artifact {
	t.Helper()
	a, err := NewArtifact(l.Identity(), l.Index)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var _ artifact.Producer = (*puller)(nil)
