package storetest_test

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weightsnap/weightsnap/artifact/fingerprint"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// TestSettle: once a checkpoint settled, the first scan records every
// file's fingerprint so that the next scan hashes nothing.
func TestSettle(t *testing.T) {
	dir := storetest.SettledCheckpoint(t, 256<<10, 2)
	c := fingerprint.New(filepath.Join(t.TempDir(), "fp"))
	first, err := c.Scan(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Scan(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(first.Src.Files); second.Stats.Hits != n || second.Stats.Misses != 0 {
		t.Fatalf("second scan of %d settled files: %+v, want every file a hit", n, second.Stats)
	}
}

// TestMemWriter: a whole file is read back; a short one, a duplicate, a
// write past the size and a path the store refuses are refused.
func TestMemWriter(t *testing.T) {
	var w storetest.MemWriter
	f, err := w.Create("a/x.bin", 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, "abcd"); err == nil {
		t.Fatal("a write past the declared size was accepted")
	}
	io.WriteString(f, "abc")
	if _, ok := w.Bytes("a/x.bin"); ok {
		t.Fatal("an open file was read back")
	}
	if open := w.Unclosed(); !slices.Equal(open, []string{"a/x.bin"}) {
		t.Fatalf("unclosed %v", open)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, ok := w.Bytes("a/x.bin"); !ok || string(b) != "abc" {
		t.Fatalf("read back %q %v", b, ok)
	}
	short, _ := w.Create("short", 2)
	if err := short.Close(); err == nil {
		t.Fatal("a short file closed cleanly")
	}
	if _, err := w.Create("short", 2); err == nil {
		t.Fatal("a path was created twice")
	}
	if _, err := w.Create("../up", 1); err == nil {
		t.Fatal("a path out of the artifact was accepted")
	}
	if got := w.Paths(); !slices.Equal(got, []string{"a/x.bin", "short"}) || len(w.Unclosed()) != 0 {
		t.Fatalf("paths %v, unclosed %v", got, w.Unclosed())
	}
}
