package store

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A file written in order writes its whole pages by direct I/O (O_DIRECT)
// where the filesystem takes it: the bytes go from the write stage's buffer
// to the disk, with no copy into the page cache, no pages to write back and
// none to drop. That is most of the system time of a write through the
// cache, and a pull shares its cores with the receive path and the hashing.
// A chunk that does not start and end on a page boundary in an aligned
// buffer (a file's last chunk, a stream continued mid-page) is written
// through the cache (writeback.go), so the two never share a page.

// directAlign is the offset, length and memory alignment of a direct write:
// a page, which every block size up to it divides.
const directAlign = 4096

// directFile is a second descriptor of a payload file, opened for direct
// writes; nil where the filesystem refuses them.
type directFile struct {
	f *os.File
}

// openDirect opens f again for direct writes; it returns nil where f is
// not open for writing or the filesystem takes no direct writes, and the
// file is then written through the cache alone.
func openDirect(f *os.File) *directFile {
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_ACCMODE == unix.O_RDONLY {
		return nil
	}
	d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return &directFile{f: d}
}

// writeAt writes p at off by direct I/O when both are page-aligned and
// says whether it did. A filesystem that refuses the alignment
// (EINVAL) gets no direct write again: the caller writes p through the
// cache.
func (d *directFile) writeAt(p []byte, off int64) (bool, error) {
	if d == nil || d.f == nil || len(p) == 0 || off%directAlign != 0 || len(p)%directAlign != 0 ||
		uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign != 0 {
		return false, nil
	}
	if _, err := d.f.WriteAt(p, off); err != nil {
		if errors.Is(err, unix.EINVAL) {
			d.close()
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// close closes the direct descriptor; the file's own stays open.
func (d *directFile) close() {
	if d != nil && d.f != nil {
		d.f.Close()
		d.f = nil
	}
}
