package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

func singlePass(t *testing.T, d *store.Domain, dir string) (*store.Lease, store.BuildResult, error) {
	t.Helper()
	src, err := artifact.ListSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d.Import(context.Background(), &artifact.Passthrough{Src: src}, func(files []artifact.FileEntry) (artifact.Identity, error) {
		full, err := src.WithDigests(files)
		if err != nil {
			return artifact.Identity{}, err
		}
		return storetest.Identity(full), nil
	})
}

func TestSinglePassImportMatchesTwoPass(t *testing.T) {
	dir, scanned := storetest.Checkpoint(t, 2<<20, 2)
	d := storetest.Open(t)
	l, res, err := singlePass(t, d, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want, _ := storetest.Identity(scanned).ID()
	if !res.Built || l.ID != want {
		t.Fatalf("single pass published %s (built %v), two-pass identity is %s", l.ID, res.Built, want)
	}
	// The same identity again: the copy is discarded, the artifact leased.
	l2, res2, err := singlePass(t, d, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if res2.Built || l2.ID != want {
		t.Fatalf("second single pass: built %v id %s", res2.Built, l2.ID)
	}
	if tmp, _ := os.ReadDir(filepath.Join(d.Root(), "tmp")); len(tmp) != 0 {
		t.Fatalf("temp entries left: %v", tmp)
	}
	if locks, _ := filepath.Glob(filepath.Join(d.Root(), "locks", "anon-*")); len(locks) != 0 {
		t.Fatalf("anonymous lock files left: %v", locks)
	}
}

// changingWriter modifies the source file after the first chunk is copied.
type changingWriter struct {
	artifact.Writer
	path string
}

func (w changingWriter) Create(p string, size int64) (artifact.FileWriter, error) {
	fw, err := w.Writer.Create(p, size)
	return touchOnWrite{fw, w.path}, err
}

type touchOnWrite struct {
	artifact.FileWriter
	path string
}

func (t touchOnWrite) Write(b []byte) (int, error) {
	f, _ := os.OpenFile(t.path, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0})
	f.Close()
	return t.FileWriter.Write(b)
}

func TestSourceChangedDuringCopyFails(t *testing.T) {
	dir, _ := storetest.Checkpoint(t, 1<<20, 1)
	src, _ := artifact.ListSource(dir)
	d := storetest.Open(t)
	victim := filepath.Join(dir, "config.json")
	p := artifact.ProducerFunc{ProducerName: "passthrough", Fn: func(ctx context.Context, w artifact.Writer) error {
		return (&artifact.Passthrough{Src: src}).Produce(ctx, changingWriter{w, victim})
	}}
	_, _, err := d.Import(context.Background(), p, func(files []artifact.FileEntry) (artifact.Identity, error) {
		t.Fatal("identity derived from a torn copy")
		return artifact.Identity{}, nil
	})
	if err == nil {
		t.Fatal("a source modified during the copy was imported")
	}
	if list, _ := d.List(context.Background()); len(list) != 0 {
		t.Fatalf("%d artifacts after a torn copy", len(list))
	}
}
