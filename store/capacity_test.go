package store_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/store"
)

func TestImportPastTmpfsCapacity(t *testing.T) {
	root := testenv.Tmpfs(t, "64m")
	_, big := storetest.Checkpoint(t, 100<<20, 2)
	d := storetest.OpenAt(t, root)
	if d.Info().FSType != "tmpfs" {
		t.Fatalf("fs type %q, want tmpfs", d.Info().FSType)
	}
	id := artifact.PassthroughIdentity(big, "", storetest.Revision, "", 0, 0)
	_, _, err := d.GetOrBuild(context.Background(), id, &artifact.Passthrough{Src: big})
	var ce *store.CapacityError
	if !errors.As(err, &ce) || !errdefs.IsResourceExhausted(err) {
		t.Fatalf("import of 100 MiB into 64 MiB: %v, want a CapacityError", err)
	}
	if list, _ := d.List(context.Background()); len(list) != 0 {
		t.Fatalf("%d artifacts visible after a failed build", len(list))
	}
	rep, _ := d.InspectDomain(context.Background())
	if !rep.HostMemory {
		t.Fatal("tmpfs domain not reported as host memory")
	}
	// The next build succeeds and leaves no temp files behind.
	_, small := storetest.Checkpoint(t, 1<<20, 1)
	l, _ := importDir(t, d, small)
	l.Close()
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 0 {
		t.Fatalf("temp entries after the next build: %v", entries)
	}
}

func TestCapacityLimitsArePreflighted(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 1)
	for _, tc := range []struct {
		name   string
		policy store.Policy
		limit  string
	}{
		{"artifact", store.Policy{MaxArtifactBytes: 1 << 20}, "max_artifact_bytes"},
		{"store", store.Policy{MaxStoreBytes: 1 << 20}, "max_store_bytes"},
		{"free", store.Policy{MinFreeBytes: 1 << 62}, "min_free_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.policy
			p.Validation, p.CoordinationTimeoutSeconds = store.ManifestAndMetadata, 10
			d, err := store.Open(context.Background(), t.TempDir(), &p)
			if err != nil {
				t.Fatal(err)
			}
			id := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
			_, _, err = d.GetOrBuild(context.Background(), id, &artifact.Passthrough{Src: src})
			var ce *store.CapacityError
			if !errors.As(err, &ce) || ce.Limit != tc.limit {
				t.Fatalf("got %v, want a CapacityError for %s", err, tc.limit)
			}
			if entries, _ := os.ReadDir(filepath.Join(d.Root(), "tmp")); len(entries) != 0 {
				t.Fatalf("temp entries after a refused build: %v", entries)
			}
		})
	}
}

func TestChildProcessDoesNotInheritLocks(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	d := storetest.Open(t)
	l, _ := importDir(t, d, src)
	defer l.Close()
	out, err := exec.Command("/bin/sh", "-c", "ls -l /proc/self/fd/").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), ".lock") || strings.Contains(string(out), l.ID.Hex()) {
		t.Fatalf("child inherited store descriptors:\n%s", out)
	}
	// The child's exit released nothing: the lease still blocks removal.
	if err := d.Remove(context.Background(), l.ID); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "has an active") {
		t.Fatalf("remove while leased after a child ran: %v", err)
	}
}

// TestCapacityAdvice: a refusal's advice fits its case: it names the limit
// that refused, the filesystem when space on it lacks, and the holders only
// when something holds the space.
func TestCapacityAdvice(t *testing.T) {
	held := []store.Held{{Bytes: 1 << 20, Why: "pinned by cli"}}
	for _, tc := range []struct {
		name      string
		ce        store.CapacityError
		want      string
		wantNotIn []string
	}{
		{"store limit, nothing held", store.CapacityError{Limit: "max_store_bytes", Checked: true},
			"; to make room: raise max_store_bytes", []string{"unpin", "filesystem"}},
		{"store limit, held", store.CapacityError{Limit: "max_store_bytes", Checked: true, Held: held},
			"; to make room: unpin (weightsnap unpin ID) or stop what leases them, or raise max_store_bytes", []string{"filesystem"}},
		{"filesystem, no store limit", store.CapacityError{Limit: "min_free_bytes", Checked: true, Held: held},
			"; to make room: unpin (weightsnap unpin ID) or stop what leases them, or give the store's filesystem more space", []string{"max_store_bytes"}},
		{"out of space", store.CapacityError{Limit: "ENOSPC", Err: errors.New("no space left on device"), Checked: true},
			"; to make room: give the store's filesystem more space", []string{"max_store_bytes", "unpin"}},
		{"eviction target", store.CapacityError{Limit: "eviction", Checked: true},
			"eviction could free 0 B", []string{"max_store_bytes", "to make room"}},
	} {
		got := tc.ce.Error()
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		for _, no := range tc.wantNotIn {
			if strings.Contains(got, no) {
				t.Errorf("%s: %q says %q", tc.name, got, no)
			}
		}
	}
}
