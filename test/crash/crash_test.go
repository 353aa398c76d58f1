// Package crash kills a store operation at every named fault point and
// checks the store's invariant afterwards, in a fresh process: every
// artifact is READY and fully valid, or denied, quarantined or absent; no
// temp directory survives the next build; no lookup returns a lease on bad
// bytes.
package crash

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/store"
)

const revision = "0123456789abcdef0123456789abcdef01234567"

// scenarios names, for each fault point, the operation that reaches it.
var scenarios = map[string]string{
	"deny":       "deny",
	"quarantine": "rebuild",
	"remove":     "remove",
	"cleanup":    "cleanup",
	"lookup":     "lookup",
	"write":      "build",
	"publish":    "build",
}

func scenarioOf(point string) string {
	prefix, _, _ := strings.Cut(point, ".")
	return scenarios[prefix]
}

var (
	childOnce sync.Once
	childBin  string
	childErr  error
)

// child builds the fault-enabled child binary once per test binary.
func child(t *testing.T) string {
	t.Helper()
	childOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ws-crash-child")
		if err != nil {
			childErr = err
			return
		}
		childBin = filepath.Join(dir, "child")
		out, err := exec.Command("go", "build", "-tags", "faults", "-o", childBin, "./child").CombinedOutput()
		if err != nil {
			childErr = fmt.Errorf("build child: %v\n%s", err, out)
		}
	})
	if childErr != nil {
		t.Fatal(childErr)
	}
	return childBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if childBin != "" {
		os.RemoveAll(filepath.Dir(childBin))
	}
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

type source struct {
	dir string
	src *artifact.SourceDir
	id  artifact.Identity
	hex string
}

func newSource(t *testing.T, size int64, shards int, seed uint64) *source {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	if err := synth.Write(context.Background(), dir, synth.Options{Size: size, Shards: shards, DType: "BF16", Seed: seed}); err != nil {
		t.Fatal(err)
	}
	src, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	id := artifact.PassthroughIdentity(src, "crash/test", revision, "", 0, 0)
	h, _ := id.Hex()
	return &source{dir: dir, src: src, id: id, hex: h}
}

func iterations() int {
	if n, err := strconv.Atoi(os.Getenv("WEIGHTSNAP_CRASH_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	return 20
}

func TestKillAtEveryFaultPoint(t *testing.T) {
	n := iterations()
	sources := make([]*source, n)
	others := make([]*source, n)
	for i := range n {
		// Payload sizes from 64 KiB to about 1.3 MiB, one to three shards.
		sources[i] = newSource(t, int64(i+1)<<16, 1+i%3, uint64(i))
		others[i] = newSource(t, 1<<16, 1, uint64(1000+i))
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
			op := prepare(t, scenario, root, s, others[i])
			out, killed := runChild(t, point+":kill", op, root, s.dir)
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
func prepare(t *testing.T, scenario, root string, s, other *source) string {
	t.Helper()
	ctx := context.Background()
	d, err := store.Open(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	publish := func() {
		l, _, err := d.GetOrBuild(ctx, s.id, &artifact.Passthrough{Src: s.src})
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	switch scenario {
	case "build":
		return "build"
	case "lookup", "remove":
		publish()
		return scenario
	case "deny":
		publish()
		corrupt(t, root, s.hex)
		return "deny"
	case "rebuild":
		publish()
		corrupt(t, root, s.hex)
		if _, err := d.Lookup(ctx, s.hex, store.FullChecksum); !store.IsInvalid(err) {
			t.Fatalf("corrupted artifact not denied: %v", err)
		}
		return "build"
	case "cleanup":
		// Another identity's build died and left its temp build behind.
		if _, killed := runChild(t, "write.mid-payload:kill", "build", root, other.dir); !killed {
			t.Fatal("could not leave a stale temp build")
		}
		return "build"
	}
	t.Fatalf("unknown scenario %s", scenario)
	return ""
}

// corrupt flips one payload byte of a published artifact, keeping its modes.
func corrupt(t *testing.T, root, id string) {
	t.Helper()
	dir := filepath.Join(root, "artifacts", id)
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(matches) == 0 {
		t.Fatal("no payload to corrupt")
	}
	p := matches[0]
	fi, _ := os.Stat(p)
	os.Chmod(p, 0o644)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, fi.Size()-1)
	b[0] ^= 0x5a
	f.WriteAt(b, fi.Size()-1)
	f.Close()
	os.Chmod(p, 0o444)
}

// checkInvariant reopens the domain in this process (not the killed one).
func checkInvariant(t *testing.T, point, root string, s *source) {
	t.Helper()
	ctx := context.Background()
	d, err := store.Open(ctx, root, nil)
	if err != nil {
		t.Fatalf("%s: reopen: %v", point, err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "artifacts"))
	for _, e := range entries {
		l, err := d.Lookup(ctx, e.Name(), store.FullChecksum)
		var de *store.DeniedError
		switch {
		case err == nil:
			if e.Name() == s.hex {
				checkBytes(t, point, l, s)
			}
			l.Close()
		case store.IsInvalid(err), errors.As(err, &de):
		default:
			t.Fatalf("%s: lookup of %s after the crash: %v", point, e.Name()[:12], err)
		}
	}
	// The next build publishes a valid artifact and leaves no temp entry.
	l, _, err := d.GetOrBuild(ctx, s.id, &artifact.Passthrough{Src: s.src})
	if err != nil {
		t.Fatalf("%s: next build: %v", point, err)
	}
	checkBytes(t, point, l, s)
	l.Close()
	if tmp, _ := os.ReadDir(filepath.Join(root, "tmp")); len(tmp) != 0 {
		t.Fatalf("%s: temp entries survive the next build: %v", point, tmp)
	}
}

// checkBytes compares every leased tensor with the source file's bytes.
func checkBytes(t *testing.T, point string, l *store.Lease, s *source) {
	t.Helper()
	for _, f := range l.Files() {
		want, err := os.ReadFile(filepath.Join(s.dir, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Data, want) && !(len(want) == 0 && f.Data == nil) {
			t.Fatalf("%s: lease of %s serves bytes that differ from the source", point, f.Path)
		}
	}
}
