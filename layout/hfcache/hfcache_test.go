package hfcache

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

func TestValidateRepo(t *testing.T) {
	for _, tc := range []struct {
		repo string
		ok   bool
	}{
		{"meta-llama/Llama-3.1-8B", true},
		{"gpt2", true},
		{"Org_1/name.v2", true},
		{"_a/_b_", true},
		{strings.Repeat("a", 96) + "/" + strings.Repeat("b", 96), true},
		{"", false},
		{"a/b/c", false},
		{"/name", false},
		{"org/", false},
		{"org//name", false},
		{"../name", false},
		{"org/..", false},
		{"org/a..b", false},
		{"org/a--b", false},
		{"org--x/name", false},
		{"org/name.git", false},
		{"org/-name", false},
		{"org/name-", false},
		{".org/name", false},
		{"org/na me", false},
		{"org/naïve", false},
		{"org\\name", false},
		{"org/name\x00", false},
		{"org/" + strings.Repeat("b", 97), false},
		{strings.Repeat("a", 97) + "/b", false},
	} {
		t.Run(tc.repo, func(t *testing.T) {
			err := ValidateRepo(tc.repo)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateRepo(%q) = %v, want ok=%v", tc.repo, err, tc.ok)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("error %v is not invalid argument", err)
			}
		})
	}
}

// FuzzValidateRepo: an accepted repo id makes one folder name, inside any
// directory it is joined to, that the hub's readers parse back to the id.
func FuzzValidateRepo(f *testing.F) {
	for _, s := range []string{"meta-llama/Llama-3.1-8B", "gpt2", "a/b/c", "../x", "a--b/c", "x/.git", "a/b\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, repo string) {
		if ValidateRepo(repo) != nil {
			return
		}
		folder := Folder(repo)
		if strings.ContainsAny(folder, "/\\\x00") || folder == "." || folder == ".." {
			t.Fatalf("folder %q of %q", folder, repo)
		}
		if j := filepath.Join("/cache", folder); j != "/cache/"+folder {
			t.Fatalf("folder %q escapes: %q", folder, j)
		}
		// scanCacheDir: split on "--", the first part is the type, the rest joined by "/".
		parts := strings.Split(folder, "--")
		if parts[0] != "models" || strings.Join(parts[1:], "/") != repo {
			t.Fatalf("folder %q reads back as %v, want %q", folder, parts, repo)
		}
	})
}

const (
	rev  = "0123456789abcdef0123456789abcdef01234567"
	shaA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	shaB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name     string
		repo     string
		revision string
		files    []File
		blobs    []Blob
		links    []Link
		bad      bool
	}{
		{name: "flat", repo: "org/m", revision: rev,
			files: []File{{"config.json", shaA}, {"model.safetensors", shaB}},
			blobs: []Blob{{"blobs/" + shaA, 0}, {"blobs/" + shaB, 1}},
			links: []Link{{"snapshots/" + rev + "/config.json", "../../blobs/" + shaA}, {"snapshots/" + rev + "/model.safetensors", "../../blobs/" + shaB}}},
		{name: "subfolders", repo: "m", revision: rev,
			files: []File{{"a/b/w.safetensors", shaA}, {"tok/t.json", shaB}},
			blobs: []Blob{{"blobs/" + shaA, 0}, {"blobs/" + shaB, 1}},
			links: []Link{{"snapshots/" + rev + "/a/b/w.safetensors", "../../../../blobs/" + shaA}, {"snapshots/" + rev + "/tok/t.json", "../../../blobs/" + shaB}}},
		{name: "same content twice is one blob", repo: "org/m", revision: rev,
			files: []File{{"a.json", shaA}, {"b.json", shaA}},
			blobs: []Blob{{"blobs/" + shaA, 0}},
			links: []Link{{"snapshots/" + rev + "/a.json", "../../blobs/" + shaA}, {"snapshots/" + rev + "/b.json", "../../blobs/" + shaA}}},
		{name: "digest revision", repo: "org/m", revision: "sha256:" + shaB,
			files: []File{{"a.json", shaA}},
			blobs: []Blob{{"blobs/" + shaA, 0}},
			links: []Link{{"snapshots/sha256:" + shaB + "/a.json", "../../blobs/" + shaA}}},
		{name: "bad repo", repo: "org/../m", revision: rev, bad: true},
		{name: "branch revision", repo: "org/m", revision: "main", bad: true},
		{name: "revision with a slash", repo: "org/m", revision: "refs/pr/1", bad: true},
		{name: "path leaves", repo: "org/m", revision: rev, files: []File{{"../x", shaA}}, bad: true},
		{name: "absolute path", repo: "org/m", revision: rev, files: []File{{"/x", shaA}}, bad: true},
		{name: "upper-case sha", repo: "org/m", revision: rev, files: []File{{"x", strings.ToUpper(shaA)}}, bad: true},
		{name: "short sha", repo: "org/m", revision: rev, files: []File{{"x", "abc"}}, bad: true},
		{name: "path twice", repo: "org/m", revision: rev, files: []File{{"x", shaA}, {"x", shaB}}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.repo, tc.revision, tc.files)
			if tc.bad {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("err %v, want invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.Folder != Folder(tc.repo) || !reflect.DeepEqual(tr.Blobs, tc.blobs) || !reflect.DeepEqual(tr.Links, tc.links) {
				t.Fatalf("tree %+v\nwant blobs %+v links %+v", tr, tc.blobs, tc.links)
			}
		})
	}
}

// TestWrite writes a tree twice over a folder with stale entries: blobs
// are the linked files, links resolve to them, refs/main is the revision,
// and a second write changes nothing; with os.Symlink (mk nil) and with a
// caller's mk, which makes every link.
func TestWrite(t *testing.T) {
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("own mk %v", own), func(t *testing.T) { testWrite(t, own) })
	}
}

func testWrite(t *testing.T, own bool) {
	src := t.TempDir()
	files := []File{{"config.json", shaA}, {"sub/model.safetensors", shaB}, {"copy.json", shaA}}
	for i, f := range files {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(f.Path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f.Path), []byte(strings.Repeat("x", i+1)), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := New("org/m", rev, files)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), tr.Folder)
	// Stale: a wrong link and a wrong ref, as a write cut short may leave.
	if err := os.MkdirAll(filepath.Join(dir, "snapshots", rev), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../blobs/elsewhere", filepath.Join(dir, "snapshots", rev, "config.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "refs", "main"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	linked := 0
	link := func(dirfd int, name string, file int) error {
		linked++
		unix.Unlinkat(dirfd, name, 0)
		return unix.Linkat(unix.AT_FDCWD, filepath.Join(src, files[file].Path), dirfd, name, 0)
	}
	var mk MakeSymlink
	made := map[string]bool{}
	if own {
		mk = func(target string, dirfd int, name string) error {
			made[strings.TrimSuffix(name, ".weightsnap-link")] = true
			return unix.Symlinkat(target, dirfd, name)
		}
	}
	for range 2 {
		if err := tr.Write(dir, link, mk); err != nil {
			t.Fatal(err)
		}
	}
	if own && len(made) != len(files) {
		t.Fatalf("mk made %d of the %d links", len(made), len(files))
	}
	if linked != 4 {
		t.Fatalf("linked %d blobs over two writes, want 4", linked)
	}
	ref, err := os.ReadFile(filepath.Join(dir, "refs", "main"))
	if err != nil || string(ref) != rev {
		t.Fatalf("refs/main %q, %v", ref, err)
	}
	for _, f := range files {
		p := filepath.Join(dir, "snapshots", rev, f.Path)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s: %v, mode %v", p, err, fi.Mode())
		}
		target, _ := os.Readlink(p)
		if filepath.IsAbs(target) {
			t.Fatalf("%s links to absolute %s", p, target)
		}
		got, err := os.Stat(p)
		want, _ := os.Stat(filepath.Join(src, files[map[string]int{shaA: 0, shaB: 1}[f.SHA256]].Path))
		if err != nil || !os.SameFile(got, want) {
			t.Fatalf("%s resolves to %v, want the inode of the first file with its content (%v)", p, got, err)
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil || len(ents) != 2 {
		t.Fatalf("blobs %v, %v", ents, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "snapshots", rev, "*.weightsnap-link"))
	if len(left) != 0 {
		t.Fatalf("temporary links left: %v", left)
	}
}

// TestWriteManyFiles: a repository of hundreds of files in many folders,
// written by several goroutines, has each blob written once, each
// snapshot entry linking its blob and refs/main, the second time too.
func TestWriteManyFiles(t *testing.T) {
	const n = 600
	files := make([]File, n)
	for i := range files {
		files[i] = File{Path: fmt.Sprintf("lang-%02d/%03d.json", i/40, i), SHA256: fmt.Sprintf("%064x", i%500)} // 100 files share a blob
	}
	rev := strings.Repeat("b", 40)
	tr, err := New("org/many", rev, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Blobs) != 500 {
		t.Fatalf("%d blobs, want 500", len(tr.Blobs))
	}
	dir := filepath.Join(t.TempDir(), tr.Folder)
	var mu sync.Mutex
	written := map[string]int{}
	link := func(dirfd int, name string, file int) error {
		mu.Lock()
		written[name]++
		mu.Unlock()
		unix.Unlinkat(dirfd, name, 0)
		fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o444)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte(files[file].SHA256))
		return err
	}
	for round := 1; round <= 2; round++ {
		if err := tr.Write(dir, link, nil); err != nil {
			t.Fatal(err)
		}
		for blob, times := range written {
			if times != round {
				t.Fatalf("blob %s written %d times in %d writes", blob, times, round)
			}
		}
		for _, f := range files {
			got, err := os.ReadFile(filepath.Join(dir, "snapshots", rev, f.Path))
			if err != nil || string(got) != f.SHA256 {
				t.Fatalf("%s through its link: %q, %v; want its blob %s", f.Path, got, err, f.SHA256)
			}
		}
	}
	if ref, err := os.ReadFile(filepath.Join(dir, "refs", "main")); err != nil || string(ref) != rev {
		t.Fatalf("refs/main: %q, %v", ref, err)
	}
}
