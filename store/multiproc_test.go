package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// Child processes of the multi-process tests run this binary again with
// WS_STORE_CHILD set to a role.
func TestMain(m *testing.M) {
	switch os.Getenv("WS_STORE_CHILD") {
	case "import":
		os.Exit(childImport())
	case "crash-after-first-file":
		os.Exit(childCrashAfterFirstFile())
	}
	os.Exit(m.Run())
}

// countingProducer appends a line to a counter file each time it runs.
type countingProducer struct {
	artifact.Passthrough
	counter string
}

func (p *countingProducer) Produce(ctx context.Context, w artifact.Writer) error {
	f, err := os.OpenFile(p.counter, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "build by pid %d\n", os.Getpid())
	f.Close()
	return p.Passthrough.Produce(ctx, w)
}

// childImport imports WS_SRC into WS_ROOT, prints the leased id and holds
// the lease until its standard input closes.
func childImport() int {
	ctx := context.Background()
	d, err := store.Open(ctx, os.Getenv("WS_ROOT"), nil)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	src, _, err := artifact.ScanSource(ctx, os.Getenv("WS_SRC"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	id := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	l, _, err := d.GetOrBuild(ctx, id, &countingProducer{Passthrough: artifact.Passthrough{Src: src}, counter: os.Getenv("WS_COUNTER")})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("leased", l.ID)
	io.Copy(io.Discard, os.Stdin)
	l.Close()
	return 0
}

func TestEightProcessesOneBuild(t *testing.T) {
	dir, _ := storetest.Checkpoint(t, 8<<20, 2)
	root := t.TempDir()
	counter := filepath.Join(t.TempDir(), "builds.txt")
	const n = 8
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		line  string
	}
	children := make([]*child, n)
	var wg sync.WaitGroup
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "WS_STORE_CHILD=import", "WS_ROOT="+root, "WS_SRC="+dir, "WS_COUNTER="+counter)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, stdin: stdin}
		children[i] = c
		wg.Go(func() {
			c.line, _ = bufio.NewReader(stdout).ReadString('\n')
		})
	}
	defer func() {
		for _, c := range children {
			c.stdin.Close()
			c.cmd.Wait()
		}
	}()
	wg.Wait() // every child has printed: all eight hold their leases now
	var id string
	for i, c := range children {
		f := strings.Fields(c.line)
		if len(f) != 2 || f[0] != "leased" {
			t.Fatalf("child %d: %q", i, c.line)
		}
		if id == "" {
			id = f[1]
		}
		if f[1] != id {
			t.Fatalf("child %d leased %s, another leased %s", i, f[1], id)
		}
	}
	raw, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if builds := strings.Count(string(raw), "\n"); builds != 1 {
		t.Fatalf("%d builds ran, want exactly 1:\n%s", builds, raw)
	}
	d := storetest.OpenAt(t, root)
	info, err := d.InspectArtifact(context.Background(), artifact.MustParseID(id))
	if err != nil || info.State != store.StateReady {
		t.Fatalf("inspect: %v %+v", err, info)
	}
	shared := map[int]bool{}
	for _, h := range info.Holders {
		if h.Mode == "READ" {
			shared[h.PID] = true
		}
	}
	for i, c := range children {
		if !shared[c.cmd.Process.Pid] {
			t.Fatalf("child %d (pid %d) holds no shared artifact lock; holders %+v", i, c.cmd.Process.Pid, info.Holders)
		}
	}
}

// childCrashAfterFirstFile builds WS_SRC and dies, as by a crash, right after
// its first payload file is complete.
func childCrashAfterFirstFile() int {
	ctx := context.Background()
	d, err := store.Open(ctx, os.Getenv("WS_ROOT"), nil)
	if err != nil {
		return 1
	}
	src, _, err := artifact.ScanSource(ctx, os.Getenv("WS_SRC"))
	if err != nil {
		return 1
	}
	id := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	crash := artifact.ProducerFunc{ProducerName: artifact.PassthroughName, Fn: func(ctx context.Context, w artifact.Writer) error {
		one := &artifact.Passthrough{Src: &artifact.SourceDir{Root: src.Root, Files: src.Files[:1]}}
		if err := one.Produce(ctx, w); err != nil {
			return err
		}
		os.Exit(3)
		return nil
	}}
	d.GetOrBuild(ctx, id, crash)
	return 1
}

// reusingProducer reuses every kept file it can and copies the rest.
type reusingProducer struct {
	src    *artifact.SourceDir
	reused []string
}

func (p *reusingProducer) Name() string { return artifact.PassthroughName }

func (p *reusingProducer) Produce(ctx context.Context, w artifact.Writer) error {
	var rest []artifact.SourceFile
	for _, f := range p.src.Files {
		_, ok, err := w.(artifact.Resumer).Reuse(artifact.Binding{Want: artifact.FileEntry{File: artifact.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256}}})
		if err != nil {
			return err
		}
		if ok {
			p.reused = append(p.reused, f.Path)
		} else {
			rest = append(rest, f)
		}
	}
	return (&artifact.Passthrough{Src: &artifact.SourceDir{Root: p.src.Root, Files: rest}}).Produce(ctx, w)
}

func TestInterruptedBuildIsResumed(t *testing.T) {
	dir, src := storetest.Checkpoint(t, 2<<20, 2)
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WS_STORE_CHILD=crash-after-first-file", "WS_ROOT="+root, "WS_SRC="+dir)
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("child did not crash where planned: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 1 {
		t.Fatalf("the crash left %d temp builds, want 1", len(entries))
	}
	d := storetest.OpenAt(t, root)
	p := &reusingProducer{src: src}
	l, res, err := d.GetOrBuild(context.Background(), artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0), p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !res.Built || len(p.reused) != 1 || p.reused[0] != src.Files[0].Path {
		t.Fatalf("reused %v, want exactly %s", p.reused, src.Files[0].Path)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 0 {
		t.Fatalf("temp entries after the resumed build: %v", entries)
	}
	full, err := d.Lookup(context.Background(), l.ID, store.FullChecksum)
	if err != nil {
		t.Fatalf("resumed artifact is not fully valid: %v", err)
	}
	full.Close()
}

func TestCancelledBuildIsResumed(t *testing.T) {
	_, src := storetest.Checkpoint(t, 2<<20, 2)
	d := storetest.Open(t)
	identity := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	stopped := artifact.ProducerFunc{ProducerName: artifact.PassthroughName, Fn: func(ctx context.Context, w artifact.Writer) error {
		one := &artifact.Passthrough{Src: &artifact.SourceDir{Root: src.Root, Files: src.Files[:1]}}
		if err := one.Produce(ctx, w); err != nil {
			return err
		}
		// A second file is half written when the call is cancelled.
		f, err := w.Create(src.Files[1].Path, src.Files[1].Size)
		if err != nil {
			return err
		}
		f.Write(make([]byte, src.Files[1].Size/2))
		return context.Canceled
	}}
	if _, _, err := d.GetOrBuild(context.Background(), identity, stopped); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled build: %v", err)
	}
	if tmp, _ := os.ReadDir(filepath.Join(d.Root(), "tmp")); len(tmp) != 1 {
		t.Fatalf("a cancelled build kept %d temp builds, want 1", len(tmp))
	}
	p := &reusingProducer{src: src}
	l, _, err := d.GetOrBuild(context.Background(), identity, p)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(p.reused) != 1 || p.reused[0] != src.Files[0].Path {
		t.Fatalf("reused %v, want only the completed %s", p.reused, src.Files[0].Path)
	}
}

// TestPassthroughAdoptsKeptFiles: the passthrough producer adopts the files
// a cancelled build of the same artifact completed and copies only the rest.
func TestPassthroughAdoptsKeptFiles(t *testing.T) {
	_, src := storetest.Checkpoint(t, 4<<20, 4)
	d := storetest.Open(t)
	identity := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	kept, rest := src.Files[:len(src.Files)-1], src.Files[len(src.Files)-1:]
	stopped := artifact.ProducerFunc{ProducerName: artifact.PassthroughName, Fn: func(ctx context.Context, w artifact.Writer) error {
		if err := (&artifact.Passthrough{Src: &artifact.SourceDir{Root: src.Root, Files: kept}}).Produce(ctx, w); err != nil {
			return err
		}
		return context.Canceled
	}}
	if _, _, err := d.GetOrBuild(context.Background(), identity, stopped); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled build: %v", err)
	}
	var mu sync.Mutex
	var copied int64
	p := &artifact.Passthrough{Src: src, Progress: func(n int64) { mu.Lock(); copied += n; mu.Unlock() }}
	l, _, err := d.GetOrBuild(context.Background(), identity, p)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if want := rest[0].Size; copied != want {
		t.Fatalf("resumed build copied %d bytes, want %d (only %s)", copied, want, rest[0].Path)
	}
	full, err := d.Lookup(context.Background(), l.ID, store.FullChecksum)
	if err != nil {
		t.Fatalf("resumed artifact is not fully valid: %v", err)
	}
	full.Close()
}
