package staging_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/staging"
)

// Min_free larger than the free space aborts before any byte
// is written, naming the numbers.
func TestMinFreeAborts(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "16m")
	src := filepath.Join(t.TempDir(), "hub")
	syntheticHub(t, src)
	state := t.TempDir()
	e := engine(t, state, staging.ModeAuto)
	rc := recipe(t, hubRecipe("hub", src, filepath.Join(dstFS, "hub"), "min_free = \"1GiB\"\nmax_used = \"100%\"\n"))

	plan, err := e.Plan(context.Background(), rc)
	if err != nil || len(plan.Problems) != 1 || plan.Problems[0].Check != "min_free" {
		t.Fatalf("dry run: %+v %v", plan, err)
	}
	_, err = e.Stage(context.Background(), rc)
	if !errdefs.IsResourceExhausted(err) || !strings.HasPrefix(err.Error(), "staging preflight: ") {
		t.Fatalf("stage: %v, want a refused preflight", err)
	}
	need := plan.Lanes[0].CopyBytes
	for _, n := range []string{fmt.Sprint(int64(1 << 30)), fmt.Sprint(need), "min_free", "free"} {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("error %q does not name %s", err, n)
		}
	}
	if entries, _ := os.ReadDir(dstFS); len(entries) != 0 {
		t.Fatalf("the destination was written: %v", entries)
	}
	if ids, _ := os.ReadDir(filepath.Join(state, "ledger")); len(ids) != 0 {
		t.Fatalf("a ledger was written: %v", ids)
	}
}

// mirrorLane writes a repository of one blob of size bytes and returns its
// recipe, staged to dst.
func mirrorLane(t *testing.T, cache, name, dst string, size int) *staging.Recipe {
	writeHub(t, cache, "org/"+name, commitOf(name), []hubFile{{path: "model.safetensors", data: randBytes(uint64(name[0]), size), lfs: true}})
	return recipe(t, hubRecipe(name, cache, dst, fmt.Sprintf("repos = [\"org/%s\"]\nverify = \"size\"\n", name)))
}

// Staging a lane past the watermark evicts the least recently
// used mirror and nothing in use; staging ls shows sizes and last use.
func TestEvictionLRU(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "64m") // max_used 75%: 48 MiB
	src := filepath.Join(t.TempDir(), "hub")
	dst := filepath.Join(dstFS, "hub")
	e := engine(t, t.TempDir(), staging.ModeAuto)
	lanes := map[string]*staging.Recipe{}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		lanes[name] = mirrorLane(t, src, name, dst, 14<<20)
	}
	for _, name := range []string{"a", "b", "c"} {
		stage(t, e, lanes[name])
	}
	ls, err := e.List(context.Background())
	if err != nil || len(ls) != 3 {
		t.Fatalf("staging ls: %+v %v", ls, err)
	}
	for _, s := range ls {
		if s.State != staging.StateStaged || s.Bytes < 14<<20 || s.Frees < 14<<20 || s.LastUsed.IsZero() {
			t.Fatalf("staging ls: %+v", s)
		}
	}

	// a is the least recently used, but a process has one of its files open.
	held, err := os.Open(filepath.Join(dst, "models--org--a", "snapshots", commitOf("a"), "model.safetensors"))
	must(t, err)
	rep := stage(t, e, lanes["d"])
	if len(rep.Evicted) != 1 || rep.Evicted[0].ID != "b" {
		t.Fatalf("staging d evicted %+v, want b (a is in use)", rep.Evicted)
	}
	if _, err := os.Stat(filepath.Join(dst, "models--org--b")); !os.IsNotExist(err) {
		t.Fatalf("b's files are still there: %v", err)
	}
	if _, err := os.Stat(held.Name()); err != nil {
		t.Fatalf("a's file in use was removed: %v", err)
	}
	if _, err := e.Evict(context.Background(), "a"); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("evict a while in use: %v", err)
	} else if !strings.Contains(err.Error(), fmt.Sprintf(" is open in pid %d (", os.Getpid())) {
		t.Fatalf("evict a while in use: %v, want the holder's pid and command", err)
	}
	held.Close()

	// Nothing in use now: the least recently used lane, a, goes next.
	rep = stage(t, e, lanes["e"])
	if len(rep.Evicted) != 1 || rep.Evicted[0].ID != "a" {
		t.Fatalf("staging e evicted %+v, want a", rep.Evicted)
	}
	states := map[string]string{}
	ls, _ = e.List(context.Background())
	for _, s := range ls {
		states[s.ID] = s.State
	}
	want := map[string]string{"a": staging.StateEvicted, "b": staging.StateEvicted, "c": staging.StateStaged, "d": staging.StateStaged, "e": staging.StateStaged}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("lanes %v, want %v", states, want)
	}
	// An evicted lane is located at its source; a staged one at its copy.
	if res, err := e.Locate(context.Background(), "org/a", nil); err != nil || res.Staged {
		t.Fatalf("locate org/a: %+v %v", res, err)
	}
	if res, err := e.Locate(context.Background(), "c", nil); err != nil || !res.Staged || res.Path != dst {
		t.Fatalf("locate lane c: %+v %v", res, err)
	}
}

// Evicting a lane whose blobs another lane hardlinked frees only what was
// its own; the other lane keeps its files.
func TestEvictSharedBlobs(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "64m")
	src := filepath.Join(t.TempDir(), "hub")
	syntheticHub(t, src)
	e := engine(t, t.TempDir(), staging.ModeAuto)
	stage(t, e, recipe(t, hubRecipe("a", src, filepath.Join(dstFS, "one"), "repos = [\"org/a\"]\n")))
	rep := stage(t, e, recipe(t, hubRecipe("b", src, filepath.Join(dstFS, "two"), "repos = [\"org/b\"]\n")))
	if rep.Lanes[0].Linked != 2 {
		t.Fatalf("lane b linked %d blobs to lane a's, want 2", rep.Lanes[0].Linked)
	}
	s, err := e.Evict(context.Background(), "a")
	must(t, err)
	if s.Frees > 1<<20+64<<10 { // a's own tokenizer and pruned-nothing 1 MiB blob, not the shared 3 MiB
		t.Fatalf("evicting a frees %d bytes, more than its unshared files", s.Frees)
	}
	if res, err := e.Locate(context.Background(), "org/b", nil); err != nil || !res.Staged {
		t.Fatalf("lane b after evicting a: %+v %v", res, err)
	}
}
