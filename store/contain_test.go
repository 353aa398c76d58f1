package store

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestContainFailedPublication: a publication that failed after its rename
// is moved to quarantine before PUBLICATION_FAILED is returned; when the
// filesystem refuses both the move and the deny marker, the failure is
// retryable and says the outcome is uncertain.
func TestContainFailedPublication(t *testing.T) {
	ctx := context.Background()
	cause := errors.New("harden: injected")
	id, _ := testIdentity().ID()
	d, err := Open(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.path(dirArtifacts, id.Hex()), 0o700); err != nil {
		t.Fatal(err)
	}
	err = d.contain(ctx, id, cause)
	if !errdefs.IsInternal(err) || !strings.Contains(err.Error(), "PUBLICATION_FAILED: artifact "+id.Short()) || !errors.Is(err, cause) {
		t.Fatalf("contain: %v, want PUBLICATION_FAILED wrapping the cause", err)
	}
	if _, err := os.Lstat(d.path(dirArtifacts, id.Hex())); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the failed publication is still in artifacts/")
	}

	testenv.RequireRoot(t, "a read-only mount")
	if err := os.Mkdir(d.path(dirArtifacts, id.Hex()), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{d.path(dirArtifacts), d.path(dirDeny)} {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
		if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatal(err)
		}
	}
	err = d.contain(ctx, id, cause)
	if !strings.HasPrefix(err.Error(), "store contain a failed publication: ") || !strings.Contains(err.Error(), "(outcome uncertain)") || !errdefs.IsUnavailable(err) {
		t.Fatalf("contain on a read-only filesystem: %v, want a retryable, outcome-uncertain storage failure", err)
	}
}
