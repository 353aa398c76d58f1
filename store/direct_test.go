package store

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDirectSpan: only the whole pages a write covers go directly, and only
// from aligned memory; everything else goes through the cache.
func TestDirectSpan(t *testing.T) {
	d := &directFile{align: 4096}
	mem := alignedBuffer(5<<12, 4096)
	for _, tc := range []struct {
		name         string
		memOff, n    int
		off          int64
		wantLo, want int64
	}{
		{"whole pages", 0, 2 << 12, 0, 0, 2 << 12},
		{"head and tail in the cache", 100, 3 << 12, 100, 3996, 3<<12 - 100},
		{"a page and a bit", 0, 4097, 8192, 0, 4096},
		{"less than a page", 0, 4095, 0, 0, 0},
		{"inside one page", 10, 100, 10, 0, 0},
		{"across a boundary, no whole page", 4000, 200, 4000, 0, 0},
		{"unaligned memory", 1, 2 << 12, 0, 0, 0},
		{"empty", 0, 0, 4096, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mem[tc.memOff : tc.memOff+tc.n]
			lo, hi := d.span(p, tc.off)
			if lo != tc.wantLo || hi != tc.want {
				t.Fatalf("span = [%d, %d), want [%d, %d)", lo, hi, tc.wantLo, tc.want)
			}
			if hi > lo && (uintptr(unsafe.Pointer(&p[lo]))%4096 != 0 || (tc.off+lo)%4096 != 0 || (hi-lo)%4096 != 0) {
				t.Fatal("the direct span is not aligned")
			}
		})
	}
}

// TestDirectWriterBypassesCache: a file written in order in pieces of every
// alignment reads back exactly, and none of its whole pages is left in the
// page cache: they went to the disk directly.
func TestDirectWriterBypassesCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dio := openDirect(f)
	if dio == nil {
		t.Fatalf("the filesystem of %s takes no direct writes (statx reports no STATX_DIOALIGN): run the tests on one that does (ext4, xfs, btrfs)", path)
	}
	defer dio.f.Close()
	data := make([]byte, 3<<20+12345)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	var failed atomic.Int64
	w := newDirectWriter(dio, f, func(error) { failed.Add(1) })
	var lent, done atomic.Int64
	pieces := []int{1 << 20, 1, 4095, 70000, 1 << 20, 3, 8192}
	off := 0
	for i := 0; off < len(data); i++ {
		n := min(pieces[i%len(pieces)], len(data)-off)
		b := alignedBuffer(n, 4096) // lent pieces start aligned; the file offsets drift
		copy(b, data[off:off+n])
		lent.Add(1)
		w.writeAt(b, int64(off), func() { done.Add(1) })
		off += n
	}
	if err := w.finish(func() error { return nil }); err != nil || failed.Load() > 0 {
		t.Fatal(err, failed.Load())
	}
	if done.Load() != lent.Load() {
		t.Fatalf("%d pieces lent, %d given back", lent.Load(), done.Load())
	}
	if cached := residentPages(t, path, len(data)); cached > 0 {
		t.Fatalf("%d whole pages were left in the page cache", cached)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(data) {
		t.Fatal("the file differs from what was written")
	}
}

// residentPages counts the pages of path's first n bytes, whole pages only,
// that the page cache holds.
func residentPages(t *testing.T, path string, n int) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	resident := 0
	for _, v := range vec[:n/os.Getpagesize()] {
		resident += int(v & 1)
	}
	return resident
}
