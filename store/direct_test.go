package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDirectWriteAt checks which writes go by direct I/O (whole pages at a
// page offset from a page-aligned buffer) and that either way the file
// holds what was written.
func TestDirectWriteAt(t *testing.T) {
	aligned := func(n int) []byte { // a page-aligned buffer: a large allocation starts on a page
		b := make([]byte, 1<<20)
		return b[:n]
	}
	tests := []struct {
		name   string
		buf    []byte
		off    int64
		direct bool
	}{
		{"whole pages at a page", aligned(2 * directAlign), directAlign, true},
		{"whole pages at the start", aligned(directAlign), 0, true},
		{"a page at an odd offset", aligned(directAlign), 100, false},
		{"a partial page", aligned(directAlign + 1), 0, false},
		{"an unaligned buffer", aligned(3 * directAlign)[1 : 2*directAlign+1], 0, false},
		{"nothing", aligned(0), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "payload"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			d := openDirect(f)
			if d == nil {
				t.Skip("the test directory's filesystem takes no direct writes")
			}
			defer d.close()
			for i := range tc.buf {
				tc.buf[i] = byte(i*7 + 1)
			}
			done, err := d.writeAt(tc.buf, tc.off)
			if err != nil {
				t.Fatal(err)
			}
			if done != tc.direct {
				t.Fatalf("written directly: %v, want %v", done, tc.direct)
			}
			if !done {
				if _, err := f.WriteAt(tc.buf, tc.off); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]byte, len(tc.buf))
			if _, err := f.ReadAt(got, tc.off); err != nil && len(got) > 0 {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.buf) {
				t.Fatal("the file does not hold the bytes written")
			}
		})
	}
}

// TestDirectReadOnly checks that a file open only for reading gets no
// direct descriptor, so no write reaches it but through its own.
func TestDirectReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := openDirect(f)
	if d != nil {
		d.close()
		t.Fatal("a read-only file has a descriptor for direct writes")
	}
	done, err := d.writeAt(make([]byte, 1<<20), 0)
	if err != nil || done {
		t.Fatalf("writeAt with no direct descriptor: %v, %v; want false, nil", done, err)
	}
}
