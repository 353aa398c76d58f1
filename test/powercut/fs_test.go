package powercut

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/store"
)

// requireFUSE skips (see testenv.Skip) where a FUSE filesystem cannot be mounted.
func requireFUSE(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "a FUSE mount")
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		testenv.Skip(t, "no usable /dev/fuse: "+err.Error())
	} else {
		f.Close()
	}
}

// mountTree mounts a power-cut filesystem over a backing tree that holds
// the directories a and b and the file a/x ("old", mode 0600).
func mountTree(t *testing.T, opts Options) (*FS, string) {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(backing, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(backing, "a", "x"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(mnt, backing, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Unmount() })
	return f, mnt
}

// afterCut powers f off and returns the materialised durable image.
func afterCut(t *testing.T, f *FS) string {
	t.Helper()
	img := f.PowerOff()
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := img.Materialise(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fsyncPath(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", p, err)
	}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// state is what the image holds at a path: its bytes, "dir", or "absent".
func state(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "absent"
	case err != nil:
		t.Fatal(err)
	case fi.IsDir():
		return "dir"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDurabilityModel(t *testing.T) {
	requireFUSE(t)
	cases := []struct {
		name string
		ops  func(t *testing.T, mnt string)
		want map[string]string // path in the image -> state
	}{
		{"a new file fsynced, its directory not: lost", func(t *testing.T, mnt string) {
			write(t, mnt+"/a/new", "data")
			fsyncPath(t, mnt+"/a/new")
		}, map[string]string{"a/new": "absent"}},
		{"a new file's directory fsynced, the file not: empty", func(t *testing.T, mnt string) {
			write(t, mnt+"/a/new", "data")
			fsyncPath(t, mnt+"/a")
		}, map[string]string{"a/new": ""}},
		{"both fsynced: intact", func(t *testing.T, mnt string) {
			write(t, mnt+"/a/new", "data")
			fsyncPath(t, mnt+"/a/new")
			fsyncPath(t, mnt+"/a")
		}, map[string]string{"a/new": "data"}},
		{"an overwrite without fsync: the old bytes", func(t *testing.T, mnt string) {
			write(t, mnt+"/a/x", "new")
		}, map[string]string{"a/x": "old"}},
		{"a rename with only the old directory fsynced: not moved", func(t *testing.T, mnt string) {
			os.Rename(mnt+"/a/x", mnt+"/b/x")
			fsyncPath(t, mnt+"/a")
		}, map[string]string{"a/x": "old", "b/x": "absent"}},
		{"a rename with the new directory fsynced: moved, once", func(t *testing.T, mnt string) {
			os.Rename(mnt+"/a/x", mnt+"/b/x")
			fsyncPath(t, mnt+"/b")
		}, map[string]string{"a/x": "absent", "b/x": "old"}},
		{"a directory moved twice, the last move synced first: one place", func(t *testing.T, mnt string) {
			os.Mkdir(mnt+"/a/d", 0o755)
			os.Rename(mnt+"/a/d", mnt+"/b/d")
			os.Rename(mnt+"/b/d", mnt+"/d")
			fsyncPath(t, mnt)
		}, map[string]string{"d": "dir", "a/d": "absent", "b/d": "absent"}},
		{"an unlink without the directory's fsync: still there", func(t *testing.T, mnt string) {
			os.Remove(mnt + "/a/x")
		}, map[string]string{"a/x": "old"}},
		{"an unlink with it: gone", func(t *testing.T, mnt string) {
			os.Remove(mnt + "/a/x")
			fsyncPath(t, mnt+"/a")
		}, map[string]string{"a/x": "absent"}},
		{"a new directory synced inside an unsynced parent: lost", func(t *testing.T, mnt string) {
			os.Mkdir(mnt+"/a/d", 0o755)
			write(t, mnt+"/a/d/f", "data")
			fsyncPath(t, mnt+"/a/d/f")
			fsyncPath(t, mnt+"/a/d")
		}, map[string]string{"a/d": "absent"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, mnt := mountTree(t, Options{})
			c.ops(t, mnt)
			img := afterCut(t, f)
			for p, want := range c.want {
				if got := state(t, filepath.Join(img, p)); got != want {
					t.Errorf("%s: %q, want %q\nlog:\n%s", p, got, want, f.Log())
				}
			}
		})
	}
}

func TestModeReachesTheImageWithTheInodesFsync(t *testing.T) {
	requireFUSE(t)
	for _, synced := range []bool{false, true} {
		f, mnt := mountTree(t, Options{})
		if err := os.Chmod(mnt+"/a/x", 0o444); err != nil {
			t.Fatal(err)
		}
		if synced {
			fsyncPath(t, mnt+"/a/x")
		}
		fi, err := os.Stat(filepath.Join(afterCut(t, f), "a", "x"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]os.FileMode{false: 0o600, true: 0o444}[synced]
		if fi.Mode().Perm() != want {
			t.Errorf("fsynced %v: mode %o, want %o", synced, fi.Mode().Perm(), want)
		}
	}
}

// TestCutAfterTheKthSync holds the k-th sync's caller at the cut and fails
// every later sync: the image has what the first k syncs made durable.
func TestCutAfterTheKthSync(t *testing.T) {
	requireFUSE(t)
	f, mnt := mountTree(t, Options{CutAfterSync: 2})
	done := make(chan error, 1)
	go func() {
		write(t, mnt+"/a/one", "1")
		write(t, mnt+"/a/two", "2")
		syncOne := func(p string) error {
			g, err := os.Open(p)
			if err != nil {
				return err
			}
			defer g.Close()
			return g.Sync()
		}
		for _, p := range []string{mnt + "/a/one", mnt + "/a", mnt + "/a/two"} {
			if err := syncOne(p); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	<-f.Cut()
	img := afterCut(t, f)
	if err := <-done; !errors.Is(err, syscall.EIO) {
		t.Fatalf("the sync at the cut returned %v, want EIO", err)
	}
	if got, want := f.Syncs(), 2; got != want {
		t.Errorf("%d syncs counted, want %d", got, want)
	}
	if got := state(t, filepath.Join(img, "a", "one")); got != "1" {
		t.Errorf("a/one: %q, want the synced %q", got, "1")
	}
	if got := state(t, filepath.Join(img, "a", "two")); got != "" {
		t.Errorf("a/two: %q, want it named by the directory's sync but empty", got)
	}
}

// TestRandomSubsetsKeepTheOrder persists random subsets of a chain of
// dependent renames: every seed leaves the directory in exactly one place,
// and the seeds together reach every place it passed through.
func TestRandomSubsetsKeepTheOrder(t *testing.T) {
	requireFUSE(t)
	seen := map[string]bool{}
	for seed := uint64(1); seed <= 24; seed++ {
		f, mnt := mountTree(t, Options{Seed: seed})
		os.Mkdir(mnt+"/a/d", 0o755)
		os.Rename(mnt+"/a/d", mnt+"/b/d")
		os.Rename(mnt+"/b/d", mnt+"/d")
		img := afterCut(t, f)
		var at []string
		for _, p := range []string{"a/d", "b/d", "d"} {
			if state(t, filepath.Join(img, p)) == "dir" {
				at = append(at, p)
			}
		}
		if len(at) > 1 {
			t.Fatalf("seed %d: the directory is in %v\n%s", seed, at, f.PowerOff().Report())
		}
		seen[filepath.Join(at...)] = true
	}
	for _, p := range []string{"", "a/d", "b/d", "d"} {
		if !seen[p] {
			t.Errorf("no seed left the directory at %q (seen %v)", p, seen)
		}
	}
}

// TestStoreAdmitsItOnlyWithTheTag: this test binary, built without the
// "powercut" tag like every release binary, refuses the power-cut
// filesystem as FUSE; the harness's child, built with it, opens a store there.
func TestStoreAdmitsItOnlyWithTheTag(t *testing.T) {
	requireFUSE(t)
	f, mnt := mountTree(t, Options{})
	_, err := store.Open(context.Background(), mnt, nil)
	var unsupported *store.UnsupportedFSError
	if !errors.As(err, &unsupported) || unsupported.Type != "fuse" {
		t.Fatalf("opening a store on the power-cut filesystem without the tag: %v, want an UnsupportedFSError naming fuse", err)
	}
	src := storetest.NewSource(t, 16<<10, 1, 1)
	out, err := exec.Command(child(t), "gc", mnt, src.Dir).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok gc") {
		t.Fatalf("the child built with the tag: %v: %s", err, out)
	}
	if f.Syncs() == 0 {
		t.Errorf("the child's store made no sync call creating its domain")
	}
}
