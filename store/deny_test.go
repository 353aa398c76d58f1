package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/store"
	"golang.org/x/sys/unix"
)

// mountReadOnly makes dir read-only for everyone, root included, with a
// read-only bind mount of itself (or a read-only tmpfs when empty is set).
func mountReadOnly(t *testing.T, dir string, empty bool) {
	t.Helper()
	testenv.RequireRoot(t, "a read-only mount")
	var err error
	if empty {
		err = unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=1m")
	} else if err = unix.Mount(dir, dir, "", unix.MS_BIND, ""); err == nil {
		err = unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
	}
	if err != nil {
		t.Fatalf("read-only mount of %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

func TestDenyMarkerFailureFallsBackToInvalidationMode(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	root := t.TempDir()
	d := storetest.OpenAt(t, root)
	held, _ := importDir(t, d, src)
	id := held.ID
	corruptTensor(t, held)
	mountReadOnly(t, filepath.Join(root, "deny"), true)

	// The marker cannot be written: a retryable storage failure, and the
	// directory carries the invalidation mode. The held lease blocks the
	// bounded quarantine attempt.
	_, err := d.Lookup(context.Background(), id, store.FullChecksum)
	if !store.IsInvalid(err) || !errdefs.IsUnavailable(err) {
		t.Fatalf("full lookup with a read-only deny/: %v, want invalid and retryable", err)
	}
	artDir := filepath.Join(root, "artifacts", id.Hex())
	if fi, err := os.Stat(artDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("artifact directory mode: %v %v, want the invalidation mode 0700", fi, err)
	}
	// The mode stops another reader, even a weaker one.
	if l, err := d.Lookup(context.Background(), id, store.ManifestAndMetadata); err == nil {
		l.Close()
		t.Fatal("a reader got a lease on an artifact carrying the invalidation mode")
	}
	// Once the lease is gone, the next reader's bounded attempt quarantines it.
	held.Close()
	if _, err := d.Lookup(context.Background(), id, store.ManifestAndMetadata); err == nil {
		t.Fatal("lease on an invalidated artifact")
	}
	if _, err := os.Stat(artDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("invalidated artifact not quarantined: %v", err)
	}
	if q, _ := os.ReadDir(filepath.Join(root, "quarantine")); len(q) != 1 {
		t.Fatalf("quarantine holds %d entries, want 1", len(q))
	}
}

func TestDomainFailsWhenNoMarkerPersists(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	root := t.TempDir()
	d := storetest.OpenAt(t, root)
	l, _ := importDir(t, d, src)
	id := l.ID
	corruptTensor(t, l)
	l.Close()
	mountReadOnly(t, filepath.Join(root, "deny"), true)
	mountReadOnly(t, filepath.Join(root, "artifacts", id.Hex()), false)

	_, err := d.Lookup(context.Background(), id, store.FullChecksum)
	failed := func(err error) bool {
		return errdefs.IsInternal(err) && strings.Contains(err.Error(), "store domain "+root+" failed")
	}
	if !failed(err) {
		t.Fatalf("lookup with neither marker writable: %v, want DomainFailedError", err)
	}
	if _, _, err := d.GetOrBuild(context.Background(), l.Identity(), nil); !failed(err) {
		t.Fatalf("build on a failed domain: %v, want DomainFailedError", err)
	}
}

// corruptTensor flips a byte in the middle of the first tensor of a leased artifact.
func corruptTensor(t *testing.T, l *store.Lease) {
	t.Helper()
	for _, f := range l.Files() {
		if len(f.Entry.Tensors) > 0 {
			te := f.Entry.Tensors[0]
			flipByte(t, f.Abs, te.Offset+te.Length/2)
			return
		}
	}
	t.Fatal("no tensor to corrupt")
}
