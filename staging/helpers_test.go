package staging_test

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightsnap/weightsnap/staging"
	"github.com/weightsnap/weightsnap/test/e2e/harness"
	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of the given size for the test: the staging
// destination is always a filesystem of its own, as on a node.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		harness.Skip(t, "mounting a tmpfs for the staging destination needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		harness.Skip(t, "cannot mount tmpfs: "+err.Error())
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// hubFile is one file of a synthetic hub snapshot.
type hubFile struct {
	path string // below snapshots/<commit>/
	data []byte
	lfs  bool // named by sha256; else by git blob sha1
}

func blobName(f hubFile) string {
	if f.lfs {
		s := sha256.Sum256(f.data)
		return hex.EncodeToString(s[:])
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(f.data))
	h.Write(f.data)
	return hex.EncodeToString(h.Sum(nil))
}

// writeHub writes a repository of a hub cache as huggingface_hub does:
// blobs by name, relative snapshot links (one more ../ per folder level),
// refs/main.
func writeHub(t testing.TB, cache, repo, commit string, files []hubFile) {
	t.Helper()
	root := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	for _, f := range files {
		name := blobName(f)
		blob := filepath.Join(root, "blobs", name)
		must(t, os.MkdirAll(filepath.Dir(blob), 0o755))
		must(t, os.WriteFile(blob, f.data, 0o644))
		link := filepath.Join(root, "snapshots", commit, filepath.FromSlash(f.path))
		must(t, os.MkdirAll(filepath.Dir(link), 0o755))
		os.Remove(link)
		depth := strings.Count("snapshots/"+commit+"/"+f.path, "/")
		must(t, os.Symlink(strings.Repeat("../", depth)+"blobs/"+name, link))
	}
	must(t, os.MkdirAll(filepath.Join(root, "refs"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "refs", "main"), []byte(commit), 0o644))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func commitOf(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// engine opens a staging engine with its state in a temp folder.
func engine(t *testing.T, state string, mode staging.Mode) *staging.Engine {
	t.Helper()
	st, err := staging.OpenState(state, "node-a")
	must(t, err)
	return staging.New(st, staging.Options{Mode: mode})
}

func recipe(t *testing.T, text string) *staging.Recipe {
	t.Helper()
	r, err := staging.ParseRecipe("test.toml", []byte(text))
	if err != nil {
		t.Fatalf("recipe: %v\n%s", err, text)
	}
	return r
}

func stage(t *testing.T, e *staging.Engine, r *staging.Recipe) *staging.Report {
	t.Helper()
	rep, err := e.Stage(context.Background(), r)
	if err != nil {
		t.Fatalf("stage: %v", err)
	}
	return rep
}

// snapshotFiles lists the files below a snapshot folder, by path, as
// their resolved bytes.
func snapshotFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[path.Clean(filepath.ToSlash(rel))] = string(b)
		return nil
	}))
	return out
}
