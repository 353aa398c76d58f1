package staging_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/staging"
	"golang.org/x/sys/unix"
)

// syntheticHub writes a hub cache of three repositories: org/a and org/b
// share a 3 MiB LFS blob and a small git file, org/b also has a download in
// flight, org/c shares nothing. Snapshot paths are nested.
func syntheticHub(t *testing.T, cache string) (commits map[string]string) {
	shared := hubFile{path: "model.safetensors", data: randBytes(1, 3<<20+17), lfs: true}
	sharedCfg := hubFile{path: "config.json", data: []byte(`{"hidden_size": 64}`)}
	commits = map[string]string{"org/a": commitOf("a"), "org/b": commitOf("b"), "org/c": commitOf("c")}
	writeHub(t, cache, "org/a", commits["org/a"], []hubFile{shared, sharedCfg,
		{path: "tokenizer/sub/tokenizer.json", data: []byte(`{"vocab": ["a", "b"]}`)},
		{path: "original/consolidated.pth", data: randBytes(2, 1<<20), lfs: true},
	})
	writeHub(t, cache, "org/b", commits["org/b"], []hubFile{shared, sharedCfg,
		{path: "deep/er/still/weights-b.safetensors", data: randBytes(3, 2<<20), lfs: true},
		{path: "README.md", data: []byte("# b\n")},
	})
	writeHub(t, cache, "org/c", commits["org/c"], []hubFile{
		{path: "model.safetensors", data: randBytes(4, 1<<20+3), lfs: true},
	})
	inflight := filepath.Join(cache, "models--org--b", "blobs", strings.Repeat("e", 64)+".incomplete")
	must(t, os.WriteFile(inflight, []byte("partial"), 0o644))
	return commits
}

func hubRecipe(id, src, dst, extra string) string {
	return "[[staging]]\nid = \"" + id + "\"\nkind = \"hub-mirror\"\nsrc = \"" + src + "\"\ndst = \"" + dst + "\"\n" + extra
}

// A synthetic hub cache mirrors to a separate filesystem;
// every snapshot path resolves to identical bytes; shared blobs are
// hardlinked once; pruned paths and downloads in flight stay behind.
func TestHubMirror(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "64m")
	src := filepath.Join(t.TempDir(), "hub")
	commits := syntheticHub(t, src)
	dst := filepath.Join(dstFS, "hub")
	e := engine(t, t.TempDir(), staging.ModeAuto)
	rep := stage(t, e, recipe(t, hubRecipe("hub", src, dst, "verify = \"full\"\nskip = [\"original\"]\n")))

	lr := rep.Lanes[0]
	if lr.State != staging.StateStaged || lr.Linked != 2 || lr.Adopted != 0 {
		t.Fatalf("report %+v: want staged, the 2 shared blobs linked", lr)
	}
	for repo, commit := range commits {
		folder := "models--" + strings.ReplaceAll(repo, "/", "--")
		want := snapshotFiles(t, filepath.Join(src, folder, "snapshots", commit))
		got := snapshotFiles(t, filepath.Join(dst, folder, "snapshots", commit))
		delete(want, "original/consolidated.pth")
		if len(got) != len(want) {
			t.Fatalf("%s: %d snapshot files staged, want %d", repo, len(got), len(want))
		}
		for p, b := range want {
			if got[p] != b {
				t.Fatalf("%s: %s differs from the source", repo, p)
			}
			// Links stay links, with the source's relative target.
			sl, _ := os.Readlink(filepath.Join(src, folder, "snapshots", commit, p))
			dl, err := os.Readlink(filepath.Join(dst, folder, "snapshots", commit, p))
			if err != nil || dl != sl || filepath.IsAbs(dl) {
				t.Fatalf("%s: %s links to %q (%v), want %q", repo, p, dl, err, sl)
			}
		}
		ref, err := os.ReadFile(filepath.Join(dst, folder, "refs", "main"))
		if err != nil || string(ref) != commit {
			t.Fatalf("%s: refs/main %q %v", repo, ref, err)
		}
	}
	// The shared blobs are one inode, linked once per repository.
	for _, name := range []string{"model.safetensors", "config.json"} {
		a := filepath.Join(dst, "models--org--a", "snapshots", commits["org/a"], name)
		b := filepath.Join(dst, "models--org--b", "snapshots", commits["org/b"], name)
		fa, _ := os.Stat(a)
		fb, _ := os.Stat(b)
		if !os.SameFile(fa, fb) || nlink(t, a) != 2 {
			t.Fatalf("%s: not one inode with two links (nlink %d)", name, nlink(t, a))
		}
	}
	// Pruned and in-flight files were not copied; only referenced blobs were.
	for _, p := range []string{"models--org--a/snapshots/" + commits["org/a"] + "/original", "models--org--b/blobs/" + strings.Repeat("e", 64) + ".incomplete"} {
		if _, err := os.Lstat(filepath.Join(dst, p)); !os.IsNotExist(err) {
			t.Fatalf("%s staged: %v", p, err)
		}
	}
	if blobs, _ := os.ReadDir(filepath.Join(dst, "models--org--a", "blobs")); len(blobs) != 3 {
		t.Fatalf("org/a: %d blobs staged, want 3 (the pruned one left out)", len(blobs))
	}

	// The lane resolves to its staged snapshot.
	res, err := e.Locate(context.Background(), "org/b", nil)
	if err != nil || !res.Staged || res.Path != filepath.Join(dst, "models--org--b", "snapshots", commits["org/b"]) {
		t.Fatalf("resolve org/b: %+v %v", res, err)
	}
}

func nlink(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(p, &st))
	return uint64(st.Nlink)
}

// A corrupted source blob is refused in full mode, naming the
// blob and the repository, and the lane is not marked staged.
func TestCorruptBlobRefused(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "64m")
	src := filepath.Join(t.TempDir(), "hub")
	commits := syntheticHub(t, src)
	// Flip one byte of org/b's own weights blob, in the middle.
	link := filepath.Join(src, "models--org--b", "snapshots", commits["org/b"], "deep/er/still/weights-b.safetensors")
	target, _ := os.Readlink(link)
	blob := filepath.Join(filepath.Dir(link), target)
	data, _ := os.ReadFile(blob)
	data[len(data)/2+12345] ^= 0x40
	must(t, os.WriteFile(blob, data, 0o644))

	dst := filepath.Join(dstFS, "hub")
	e := engine(t, t.TempDir(), staging.ModeAuto)
	rep, err := e.Stage(context.Background(), recipe(t, hubRecipe("hub", src, dst, "")))
	if !errdefs.IsDataLoss(err) || !strings.Contains(err.Error(), ": refused") {
		t.Fatalf("stage: %v, want a refused mismatch", err)
	}
	name := filepath.Base(blob)
	if !strings.Contains(err.Error(), ": repo org/b: blob "+name) || !strings.Contains(err.Error(), "blob "+name) || !strings.Contains(err.Error(), "repo org/b") {
		t.Fatalf("error %q does not name blob %s and repo org/b", err, name)
	}
	if rep.Lanes[0].State == staging.StateStaged {
		t.Fatal("lane marked staged")
	}
	if _, err := os.Lstat(filepath.Join(dst, "models--org--b", "blobs", name)); !os.IsNotExist(err) {
		t.Fatalf("the corrupt blob is on the destination: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "models--org--b", "blobs", name+".staging.incomplete")); !os.IsNotExist(err) {
		t.Fatalf("a temp file of the corrupt blob is left: %v", err)
	}
	ls, err := e.List(context.Background())
	if err != nil || len(ls) != 1 || ls[0].State != staging.StateFailed || !strings.Contains(ls[0].Error, name) {
		t.Fatalf("staging ls: %+v %v", ls, err)
	}
	// Not staged: resolution answers the source.
	res, err := e.Locate(context.Background(), "org/b", nil)
	if err != nil || res.Staged || res.Path != filepath.Join(src, "models--org--b", "snapshots", commits["org/b"]) {
		t.Fatalf("resolve org/b: %+v %v", res, err)
	}
}
