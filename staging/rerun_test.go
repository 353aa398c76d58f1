package staging_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/internal/testenv"
	"github.com/weightsnap/weightsnap/staging"
)

// manyFiles writes one repository of n files (every tenth a 1.5 MiB LFS
// blob, the rest small git files) and returns its commit.
func manyFiles(t *testing.T, cache string, n int) string {
	files := make([]hubFile, n)
	for i := range files {
		size, lfs := 1000+i, false
		if i%10 == 0 {
			size, lfs = 1<<20+4096+i, true
		}
		files[i] = hubFile{path: fmt.Sprintf("shard-%02d/file-%04d.bin", i%16, i), data: randBytes(uint64(100+i), size), lfs: lfs}
	}
	commit := commitOf("many")
	writeHub(t, cache, "org/many", commit, files)
	return commit
}

// Re-running auto on 1,000 staged files copies nothing;
// touching source mtimes changes nothing; changing one source blob
// re-stages only it.
func TestAutoRerun(t *testing.T) {
	for _, verify := range []string{"sample-hash", "full"} {
		t.Run(verify, func(t *testing.T) {
			dstFS := testenv.Tmpfs(t, "256m")
			src := filepath.Join(testenv.Tmpfs(t, "256m"), "hub") // the "network" source: another filesystem
			commit := manyFiles(t, src, 1000)
			e := engine(t, t.TempDir(), staging.ModeAuto)
			rc := recipe(t, hubRecipe("many", src, filepath.Join(dstFS, "hub"), "verify = \""+verify+"\"\n"))
			first := stage(t, e, rc).Lanes[0]
			// 1,000 blobs and refs/main copied, 1,000 snapshot links written.
			if first.Copied != 1001 || first.Links != 1000 {
				t.Fatalf("first run: %+v", first)
			}
			again := stage(t, e, rc).Lanes[0]
			if again.Copied != 0 || again.Linked != 0 || again.Adopted != 0 || again.Links != 0 || again.Unchanged != 2001 {
				t.Fatalf("re-run: %+v, want all 2,001 items unchanged", again)
			}

			// Source mtimes are no evidence either way.
			blobs := filepath.Join(src, "models--org--many", "blobs")
			names, _ := os.ReadDir(blobs)
			future := time.Now().Add(time.Hour)
			for _, n := range names {
				must(t, os.Chtimes(filepath.Join(blobs, n.Name()), future, future))
			}
			touched := stage(t, e, rc).Lanes[0]
			if touched.Copied != 0 || touched.Unchanged != 2001 {
				t.Fatalf("after touching mtimes: %+v", touched)
			}

			// One changed blob: in sample-hash mode rewritten in place (a
			// change inside a sampled range), in full mode as a hub cache
			// changes: a new revision links one path to a new blob.
			snap := filepath.Join(src, "models--org--many", "snapshots", commit)
			if verify == "sample-hash" {
				blob := resolveLink(t, filepath.Join(snap, "shard-00/file-0000.bin"))
				data, _ := os.ReadFile(blob)
				data[0] ^= 1
				must(t, os.WriteFile(blob, data, 0o644))
			} else {
				writeHub(t, src, "org/many", commit, []hubFile{{path: "shard-00/file-0000.bin", data: randBytes(7, 3<<19), lfs: true}})
			}
			changed := stage(t, e, rc).Lanes[0]
			wantLinks, wantRemoved := 0, 0
			if verify == "full" {
				wantLinks, wantRemoved = 1, 1 // the path's link now names the new blob; the old blob goes
			}
			if changed.Copied != 1 || changed.Links != wantLinks || changed.Removed != wantRemoved || changed.Unchanged != 2001-1-wantLinks {
				t.Fatalf("after changing one blob: %+v", changed)
			}
			got, _ := os.ReadFile(filepath.Join(dstFS, "hub", "models--org--many", "snapshots", commit, "shard-00/file-0000.bin"))
			want, _ := os.ReadFile(filepath.Join(snap, "shard-00/file-0000.bin"))
			if string(got) != string(want) {
				t.Fatal("the re-staged file differs from the source")
			}
		})
	}
}

func resolveLink(t *testing.T, p string) string {
	t.Helper()
	target, err := os.Readlink(p)
	must(t, err)
	return filepath.Join(filepath.Dir(p), target)
}

// A run stopped part way resumes without copying the files it verified.
func TestResumeAfterStop(t *testing.T) {
	dstFS := testenv.Tmpfs(t, "256m")
	src := filepath.Join(t.TempDir(), "hub")
	manyFiles(t, src, 200)
	state := t.TempDir()
	st, err := staging.OpenState(state, "node-a")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var copied int64
	stop := staging.New(st, staging.Options{Progress: func(string, int64) staging.Progress {
		return progressFunc(func(n int64) {
			if copied += n; copied > 8<<20 {
				cancel()
			}
		})
	}})
	rc := recipe(t, hubRecipe("many", src, filepath.Join(dstFS, "hub"), ""))
	rep, err := stop.Stage(ctx, rc)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped run: %v", err)
	}
	done := rep.Lanes[0].Copied
	if done == 0 || done >= 200 {
		t.Fatalf("stopped run copied %d files", done)
	}
	// The lane is not staged; the next run copies only the rest.
	l, err := st.Load("many")
	if err != nil || l.State != staging.StateFailed {
		t.Fatalf("ledger after the stop: %v %v", l.State, err)
	}
	rest := stage(t, engine(t, state, staging.ModeAuto), rc).Lanes[0]
	if rest.Copied+rest.Adopted != 201-done || rest.Unchanged != done { // 200 blobs and refs/main
		t.Fatalf("resumed run: %+v after %d were copied", rest, done)
	}
}

type progressFunc func(int64)

func (f progressFunc) Add(n int64) { f(n) }
func (f progressFunc) Done()       {}

// A run killed part way (no ledger written, only its journal) resumes
// without copying what it journaled; a file renamed into place but not yet
// journaled would be verified where it is (adopted), not copied.
func TestResumeAfterKill(t *testing.T) {
	if dir := os.Getenv("STAGING_KILL_CHILD"); dir != "" {
		st, err := staging.OpenState(filepath.Join(dir, "state"), "node-a")
		must(t, err)
		var copied int64
		e := staging.New(st, staging.Options{Workers: 1, JournalEvery: time.Nanosecond, Progress: func(string, int64) staging.Progress {
			return progressFunc(func(n int64) {
				if copied += n; copied > 12<<20 {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			})
		}})
		e.Stage(context.Background(), recipe(t, hubRecipe("many", filepath.Join(dir, "hub"), filepath.Join(dir, "dst"), "")))
		t.Fatal("not killed")
	}
	dir := testenv.Tmpfs(t, "256m")
	manyFiles(t, filepath.Join(dir, "hub"), 200)
	child := exec.Command(os.Args[0], "-test.run=^TestResumeAfterKill$")
	child.Env = append(os.Environ(), "STAGING_KILL_CHILD="+dir)
	out, err := child.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v\n%s", err, out)
	}
	st, err := staging.OpenState(filepath.Join(dir, "state"), "node-a")
	must(t, err)
	l, err := st.Load("many")
	if err != nil || l.State != staging.StateStaging {
		t.Fatalf("ledger after the kill: %+v %v", l, err)
	}
	journaled := len(l.Entries)
	rest := stage(t, staging.New(st, staging.Options{}), recipe(t, hubRecipe("many", filepath.Join(dir, "hub"), filepath.Join(dir, "dst"), ""))).Lanes[0]
	if journaled == 0 || rest.Unchanged != journaled || rest.Copied+rest.Adopted+rest.Unchanged != 201 || rest.Copied > 201-journaled {
		t.Fatalf("resumed run: %+v after %d journaled", rest, journaled)
	}
	t.Logf("killed after %d journaled files; resumed: %d unchanged, %d adopted, %d copied", journaled, rest.Unchanged, rest.Adopted, rest.Copied)
}
