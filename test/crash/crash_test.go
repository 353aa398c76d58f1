// Package crash kills a store operation at every named fault point and
// checks the store's invariant afterwards, in a fresh process: after the
// next Open and gc every artifact is READY and fully valid (or found
// invalid, where the test corrupted it) or gone, into quarantine or out of
// the store; no byte is held by an interrupted removal; inspect --domain
// accounts every byte under the root; the next build publishes and no temp
// directory survives it; no lookup returns a lease on bad bytes.
package crash

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// scenarios names, for each fault point, the operation that reaches it.
var scenarios = map[string]string{
	"deny":       "deny",
	"quarantine": "rebuild",
	"remove":     "remove",
	"cleanup":    "cleanup",
	"lookup":     "lookup",
	"write":      "build",
	"publish":    "build",
	"evict":      "evict",
	"gc":         "gc",
}

func scenarioOf(point string) string {
	prefix, _, _ := strings.Cut(point, ".")
	return scenarios[prefix]
}

// childBin is the fault-enabled child binary.
var childBin = &storetest.Child{Tags: "faults"}

func child(t *testing.T) string { return childBin.Path(t) }

func TestMain(m *testing.M) {
	code := m.Run()
	childBin.Remove()
	os.Exit(code)
}

// runChild runs OP with an optional fault spec and returns its output and
// whether SIGKILL ended it.
func runChild(t *testing.T, fault, op, root, src string, extraEnv ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(child(t), op, root, src)
	cmd.Env = append(os.Environ(), append(extraEnv, "WEIGHTSNAP_FAULT="+fault)...)
	out, _ := cmd.Output()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return string(out), ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func iterations() int {
	if n, err := strconv.Atoi(os.Getenv("WEIGHTSNAP_CRASH_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	return 20
}

func TestKillAtEveryFaultPoint(t *testing.T) {
	n := iterations()
	sources := make([]*storetest.Source, n)
	others := make([]*storetest.Source, n)
	thirds := make([]*storetest.Source, n)
	for i := range n {
		// Payload sizes from 64 KiB to about 1.3 MiB, one to three shards.
		sources[i] = storetest.NewSource(t, int64(i+1)<<16, 1+i%3, uint64(i))
		others[i] = storetest.NewSource(t, 1<<16, 1, uint64(1000+i))
		thirds[i] = storetest.NewSource(t, 1<<16, 1, uint64(2000+i))
	}
	kills := 0
	for _, point := range store.FaultPoints {
		scenario := scenarioOf(point)
		if scenario == "" {
			t.Fatalf("fault point %s has no scenario", point)
		}
		for i := range n {
			s := sources[i]
			root := filepath.Join(t.TempDir(), "store")
			op := prepare(t, scenario, root, s, others[i], thirds[i])
			out, killed := runChild(t, point+":kill", op, root, s.Dir)
			if !killed {
				t.Fatalf("%s (%s, iteration %d): the child was not killed at the point: %s", point, scenario, i, out)
			}
			kills++
			checkInvariant(t, point, root, s)
		}
	}
	fmt.Printf("crash harness: %d fault points, %d kills, invariant held every time\n", len(store.FaultPoints), kills)
}

// prepare builds the state a scenario starts from and returns the child's op.
func prepare(t *testing.T, scenario, root string, s, other, third *storetest.Source) string {
	t.Helper()
	switch scenario {
	case "build":
		return "build"
	case "lookup", "remove", "evict":
		s.Publish(t, root)
		return scenario
	case "deny":
		s.Publish(t, root)
		storetest.Corrupt(t, root, s.ID.Hex())
		return "deny"
	case "rebuild":
		d := s.Publish(t, root)
		storetest.Corrupt(t, root, s.ID.Hex())
		if _, err := d.Lookup(context.Background(), s.ID, store.FullChecksum); !store.IsInvalid(err) {
			t.Fatalf("corrupted artifact not denied: %v", err)
		}
		return "build"
	case "cleanup":
		leaveStaleBuild(t, root, other)
		return "build"
	case "gc":
		// Every kind of garbage gc handles: a stale temp build, a denied
		// artifact, a quarantined entry past its age.
		s.Publish(t, root)
		leaveStaleBuild(t, root, other)
		d := third.Publish(t, root)
		storetest.Corrupt(t, root, third.ID.Hex())
		if _, err := d.Lookup(context.Background(), third.ID, store.FullChecksum); !store.IsInvalid(err) {
			t.Fatalf("corrupted artifact not denied: %v", err)
		}
		aged := filepath.Join(root, "quarantine", fmt.Sprintf("%s.%d", other.ID.Hex(), time.Now().Add(-30*24*time.Hour).UnixNano()))
		if err := os.MkdirAll(aged, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(aged, "model.safetensors"), make([]byte, 4096), 0o444); err != nil {
			t.Fatal(err)
		}
		return "gc"
	}
	t.Fatalf("unknown scenario %s", scenario)
	return ""
}

// leaveStaleBuild leaves the temp build of src's identity that a killed
// build left, older than [store] stale_build_seconds: the next build or gc
// removes it (a younger one is kept for its artifact's next build).
func leaveStaleBuild(t *testing.T, root string, src *storetest.Source) {
	t.Helper()
	if _, killed := runChild(t, "write.mid-payload:kill", "build", root, src.Dir); !killed {
		t.Fatal("could not leave a stale temp build")
	}
	old := time.Now().Add(-2 * 24 * time.Hour)
	filepath.WalkDir(filepath.Join(root, "tmp"), func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			os.Chtimes(p, old, old)
		}
		return nil
	})
}

// checkInvariant reopens the domain in this process (not the killed one)
// and runs gc.
func checkInvariant(t *testing.T, point, root string, s *storetest.Source) {
	t.Helper()
	ctx := context.Background()
	d, err := store.Open(ctx, root, nil)
	if err != nil {
		t.Fatalf("%s: reopen: %v", point, err)
	}
	if _, err := d.GC(ctx, store.GCOptions{}); err != nil {
		t.Fatalf("%s: gc after the crash: %v", point, err)
	}
	checkAccounting(t, point, d)
	entries, _ := os.ReadDir(filepath.Join(root, "artifacts"))
	for _, e := range entries {
		id, err := artifact.ParseIDHex(e.Name())
		if err != nil {
			t.Fatalf("%s: artifacts/%s survives the next Open and gc: %v", point, e.Name(), err)
		}
		l, err := d.Lookup(ctx, id, store.FullChecksum)
		switch {
		case err == nil:
			if e.Name() == s.ID.Hex() {
				checkBytes(t, point, l, s)
			}
			l.Close()
		case store.IsInvalid(err) && corrupted[scenarioOf(point)]:
			// The test corrupted its bytes; only a full checksum finds it.
		default:
			t.Fatalf("%s: lookup of %s after the crash and gc: %v", point, e.Name()[:12], err)
		}
	}
	// Nothing that was merely being removed or evicted is quarantined.
	q, _ := os.ReadDir(filepath.Join(root, "quarantine"))
	if sc := scenarioOf(point); len(q) > 0 && (sc == "remove" || sc == "evict") {
		t.Fatalf("%s: quarantined after the crash: %v", point, q)
	}
	// The next build publishes a valid artifact and leaves no temp entry.
	l, _, err := d.GetOrBuild(ctx, s.Identity, &artifact.Passthrough{Src: s.Src})
	if err != nil {
		t.Fatalf("%s: next build: %v", point, err)
	}
	checkBytes(t, point, l, s)
	l.Close()
	if tmp, _ := os.ReadDir(filepath.Join(root, "tmp")); len(tmp) != 0 {
		t.Fatalf("%s: temp entries survive the next build: %v", point, tmp)
	}
}

// corrupted names the scenarios whose artifact the test corrupts.
var corrupted = map[string]bool{"deny": true, "rebuild": true}

// checkAccounting checks that inspect --domain shows nothing denied, invalid
// or being removed, and accounts every byte under the root.
func checkAccounting(t *testing.T, point string, d *store.Domain) {
	t.Helper()
	if err := storetest.CheckSettled(context.Background(), d); err != nil {
		t.Fatalf("%s: %v", point, err)
	}
}

// checkBytes compares every leased file with the source file's bytes.
func checkBytes(t *testing.T, point string, l *store.Lease, s *storetest.Source) {
	t.Helper()
	if err := storetest.SameBytes(l, s.Dir); err != nil {
		t.Fatalf("%s: %v", point, err)
	}
}
