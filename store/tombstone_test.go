package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// TestInterruptedRemovalFinishes leaves what a removal killed after its
// rename leaves, a tombstone beside the artifacts, and checks that
// inspect --domain shows it as removing, ls does not list it, and each of
// the next Open, gc, build of another artifact and eviction deletes it.
func TestInterruptedRemovalFinishes(t *testing.T) {
	ctx := context.Background()
	_, gone := storetest.Checkpoint(t, 1<<20, 1)
	_, other := storetest.Checkpoint(t, 1<<19, 2)
	_, third := storetest.Checkpoint(t, 1<<18, 1)
	for _, tc := range []struct {
		name   string
		finish func(t *testing.T, d *store.Domain) *store.Domain
	}{
		{"open", func(t *testing.T, d *store.Domain) *store.Domain { return storetest.OpenAt(t, d.Root()) }},
		{"gc", func(t *testing.T, d *store.Domain) *store.Domain {
			if _, err := d.GC(ctx, store.GCOptions{}); err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"build of another artifact", func(t *testing.T, d *store.Domain) *store.Domain {
			l, _ := importDir(t, d, third)
			l.Close()
			return d
		}},
		{"eviction of another artifact", func(t *testing.T, d *store.Domain) *store.Domain {
			id, _ := storetest.Identity(other).ID()
			if _, err := d.Evict(ctx, id, "manual"); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := storetest.OpenAt(t, t.TempDir())
			id := storetest.Seed(t, d, gone)
			storetest.Seed(t, d, other)
			hex := mustID(t, id).Hex()
			tomb := filepath.Join(d.Root(), "artifacts", ".cleanup."+hex+".0a0b0c0d0e0f")
			if err := os.Rename(filepath.Join(d.Root(), "artifacts", hex), tomb); err != nil {
				t.Fatal(err)
			}
			r, err := d.InspectDomain(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.Removing.Count != 1 || r.Removing.Bytes < 1<<20 || r.Ready.Count != 1 {
				t.Fatalf("inspect --domain: removing %+v, ready %+v; want the tombstone removing and one ready", r.Removing, r.Ready)
			}
			if du, err := storetest.TreeBytes(d.Root()); err != nil || r.TotalBytes != du {
				t.Fatalf("inspect --domain accounts %d bytes, the root holds %d", r.TotalBytes, du)
			}
			if list, _ := d.List(ctx); len(list) != 1 {
				t.Fatalf("ls lists %d artifacts, want 1", len(list))
			}
			d = tc.finish(t, d)
			if _, err := os.Lstat(tomb); !os.IsNotExist(err) {
				t.Fatalf("the tombstone survives the %s: %v", tc.name, err)
			}
			if r, err := d.InspectDomain(ctx); err != nil || r.Removing.Count != 0 {
				t.Fatalf("inspect --domain after the %s: %v, removing %+v", tc.name, err, r.Removing)
			}
		})
	}
}

// TestGCClearsUnhardened: gc moves an artifact that a stopped publication
// or quarantine left without the hardened mode to quarantine, so that ls
// and inspect --domain agree it is gone, and keeps a READY one.
func TestGCClearsUnhardened(t *testing.T) {
	ctx := context.Background()
	d := storetest.OpenAt(t, t.TempDir())
	_, bad := storetest.Checkpoint(t, 1<<20, 1)
	_, good := storetest.Checkpoint(t, 1<<19, 2)
	badID := mustID(t, storetest.Seed(t, d, bad))
	storetest.Seed(t, d, good)
	if err := os.Chmod(filepath.Join(d.Root(), "artifacts", badID.Hex()), 0o700); err != nil {
		t.Fatal(err)
	}
	r, _ := d.InspectDomain(ctx)
	info, _ := d.InspectArtifact(ctx, badID)
	if r.Invalid.Count != 1 || info.State != store.StateInvalid {
		t.Fatalf("before gc: inspect --domain invalid %+v, ls state %s; want both invalid", r.Invalid, info.State)
	}
	rep, err := d.GC(ctx, store.GCOptions{})
	if err != nil || rep.Cleared.Count != 1 {
		t.Fatalf("gc: %+v, %v; want one artifact cleared", rep, err)
	}
	r, _ = d.InspectDomain(ctx)
	if r.Invalid.Count != 0 || r.Ready.Count != 1 || r.Quarantined.Count != 1 {
		t.Fatalf("after gc: ready %+v, invalid %+v, quarantined %+v", r.Ready, r.Invalid, r.Quarantined)
	}
}

func mustID(t *testing.T, identity artifact.Identity) artifact.ID {
	t.Helper()
	id, err := identity.ID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
