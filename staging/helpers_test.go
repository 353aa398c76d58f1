package staging_test

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/staging"
	"github.com/weightsnap/weightsnap/staging/hubsynth"
)

// hubFile is one file of a synthetic hub snapshot.
type hubFile struct {
	path string // below snapshots/<commit>/
	data []byte
	lfs  bool // named by sha256; else by git blob sha1
}

// writeHub adds files to the snapshot commit of repo in a hub cache.
func writeHub(t testing.TB, cache, repo, commit string, files []hubFile) {
	t.Helper()
	for _, f := range files {
		must(t, hubsynth.AddBytes(cache, repo, commit, f.path, f.data, f.lfs))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
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
