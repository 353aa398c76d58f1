package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"golang.org/x/sys/unix"
)

// TestWrittenFilesLeaveThePageCache: a file written in order (an import)
// and one written by positioned writes in any order (a fetch) leave the page
// cache once written: a build evicts nothing else the node has cached.
func TestWrittenFilesLeaveThePageCache(t *testing.T) {
	_, src := storetest.Checkpoint(t, 96<<20, 2)
	seed, _ := importDir(t, storetest.Open(t), src)
	defer seed.Close()
	for _, tc := range []struct {
		name string
		p    artifact.Producer
	}{
		{"in order", &artifact.Passthrough{Src: src}},
		{"any order", storetest.TreeFetch(seed, "", "", false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := storetest.Open(t)
			l, _, err := d.GetOrBuild(context.Background(), seed.Identity(), tc.p)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, e := range l.Index.Files {
				// The lease read each header through its mapping, and the
				// kernel read ahead of it (read_ahead_kb, 8 MiB here): only
				// the pages past headerReach are the writer's to leave.
				if n := cachedPages(t, filepath.Join(l.Dir, e.Path), headerReach); n > 0 {
					t.Errorf("%s: %d pages past the first %d bytes left in the page cache", e.Path, n, headerReach)
				}
			}
		})
	}
}

// headerReach is how far from its start a file's pages may be cached by
// reading its header.
const headerReach = 16 << 20

// cachedPages counts the pages of the file at path, from byte from on, that
// the page cache holds.
func cachedPages(t *testing.T, path string, from int64) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= from {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), from, int(fi.Size()-from), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
