package resolve_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
)

// TestPublishCompileCache: a compile cache (files that are not
// checkpoints: binaries, hidden and empty files, nested directories) is
// published after a load under the identity its keys make, and a lookup
// of that identity alone, which a later start computes the same way,
// finds the files as they were.
func TestPublishCompileCache(t *testing.T) {
	root := t.TempDir()
	rt := newRuntime(t, resolve.Config{Mode: resolve.Required, Root: root, AllowPostLoadPublish: true})
	weights := identityOf(t, producers.Passthrough{}, storetest.SettledCheckpoint(t, 64<<10, 1))
	forID, err := weights.ID()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"inductor/fx/ab/kernel.py": "print(1)\n", "triton/x/kernel.cubin": "\x7fELF\x00\x01", ".lock": "", "aot/model.bin": "not a checkpoint"}
	dir := t.TempDir()
	for p, body := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := artifact.CacheKey{For: forID, Engine: "standin", EngineVersion: "1", GPUArch: "none", TPSize: 1, PPSize: 1}
	id, err := artifact.CompileCacheIdentity(weights, key, producers.CompileCacheRef())
	if err != nil {
		t.Fatal(err)
	}
	p, err := producers.NewCompileCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rt.PublishAfterLoad(context.Background(), id, p)
	if err != nil || rep.Outcome != resolve.OutcomePublished || rep.Source != "producer:"+producers.CompileCacheName {
		t.Fatalf("publish: %v %+v", err, rep)
	}
	later, err := artifact.CompileCacheIdentity(weights, key, producers.CompileCacheRef())
	if err != nil {
		t.Fatal(err)
	}
	laterID, _ := later.ID()
	if laterID != rep.ID {
		t.Fatalf("a later start computes %s, the cache was published as %s", laterID, rep.ID)
	}
	d, err := store.Open(context.Background(), root, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.Lookup(context.Background(), laterID, store.FullChecksum)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Files()) != len(files) {
		t.Fatalf("%d files stored, want %d", len(l.Files()), len(files))
	}
	for p, body := range files {
		got, err := os.ReadFile(filepath.Join(l.Dir, filepath.FromSlash(p)))
		if err != nil || string(got) != body {
			t.Fatalf("%s: %q %v, want %q", p, got, err, body)
		}
	}
}
