package snapshotter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/layout/hfcache"
	"github.com/weightsnap/weightsnap/pointer"
	"golang.org/x/sys/unix"
)

// TestHostMountHF: two artifacts mounted with the hf layout under one cache
// root are two repository folders, each refs/main -> the revision,
// snapshots/<revision>/<file> relative links into blobs/, and every blob
// the store's inode; bad layouts and repo ids are refused as invalid input.
func TestHostMountHF(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir())
	ids := []string{n.importModel(t, 256<<10, 31), n.importModel(t, 128<<10, 32)}
	repos := []string{"org/alpha", "beta"}
	c := n.serveHostMounts(t)
	root := filepath.Join(t.TempDir(), "hub") // made by the mount

	for i, id := range ids {
		folder := filepath.Join(root, hfcache.Folder(repos[i]))
		t.Cleanup(func() { unix.Unmount(folder, unix.MNT_DETACH) })
		mi, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(id), Dir: root, Layout: pointer.LayoutHF, Repo: repos[i]})
		if err != nil {
			t.Fatal(err)
		}
		if mi.Dir != folder || mi.Layout != pointer.LayoutHF || mi.Repo != repos[i] {
			t.Fatalf("mount %+v, want at %s", mi, folder)
		}
		l, err := n.dom.Lookup(ctx, artifact.MustParseID(id), "")
		if err != nil {
			t.Fatal(err)
		}
		if ref, err := os.ReadFile(filepath.Join(folder, "refs", "main")); err != nil || string(ref) != storetest.Revision {
			t.Fatalf("refs/main %q %v", ref, err)
		}
		for _, f := range l.Files() {
			snap := filepath.Join(folder, "snapshots", storetest.Revision, f.Path)
			target, err := os.Readlink(snap)
			if want := strings.Repeat("../", 2+strings.Count(f.Path, "/")) + "blobs/" + f.Entry.SHA256; err != nil || target != want {
				t.Fatalf("%s links to %q (%v), want %q", snap, target, err, want)
			}
			if !isStoreInode(t, snap, f.File) {
				t.Fatalf("%s is not the store's inode", f.Path)
			}
		}
		if _, err := os.Stat(filepath.Join(folder, pointer.Dir, l.ID.Hex()+".json")); err != nil {
			t.Fatalf("no pointer file in the repository folder: %v", err)
		}
		l.Close()
		if err := os.WriteFile(filepath.Join(folder, "refs", "pr"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Fatalf("write into the mount: %v, want EROFS", err)
		}
	}
	ents, err := os.ReadDir(root)
	if err != nil || len(ents) != 2 || ents[0].Name() != "models--beta" || ents[1].Name() != "models--org--alpha" {
		t.Fatalf("cache root holds %v (%v), want the two repository folders only", ents, err)
	}

	for _, tc := range []struct {
		name         string
		layout, repo string
	}{
		{"unknown layout", "diffusers", "org/x"},
		{"repo without layout", "", "org/x"},
		{"no repo", pointer.LayoutHF, ""},
		{"two slashes", pointer.LayoutHF, "a/b/c"},
		{"dot-dot", pointer.LayoutHF, "../x"},
		{"double dash", pointer.LayoutHF, "a--b/x"},
	} {
		_, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(ids[0]), Dir: t.TempDir(), Layout: tc.layout, Repo: tc.repo})
		if !errdefs.IsInvalidArgument(err) || repeatsClass(err) {
			t.Errorf("%s: %v, want invalid argument", tc.name, err)
		}
	}
	// The same repository twice in one root: its folder is a mount already.
	if _, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(ids[1]), Dir: root, Layout: pointer.LayoutHF, Repo: repos[0]}); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("a second mount of %s in %s: %v, want refused as busy", repos[0], root, err)
	}
	// A repository folder that is a symbolic link is refused.
	other := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(other, hfcache.Folder("org/link"))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.HostMount(ctx, control.HostMountRequest{ID: artifact.MustParseID(ids[0]), Dir: other, Layout: pointer.LayoutHF, Repo: "org/link"}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a repository folder that is a link: %v, want invalid argument", err)
	}

	for i := range ids {
		if err := c.HostUnmount(ctx, filepath.Join(root, hfcache.Folder(repos[i]))); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.sn.leases.identities(); len(got) != 0 {
		t.Fatalf("leases after the unmounts: %v", got)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) != 0 {
		t.Fatalf("the cache root holds %v (%v) after the unmounts, want nothing", ents, err)
	}
}
