package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// A payload file passes through the page cache only on its way to the
// disk. Every writebackChunk bytes its writer starts the writeback of what
// it wrote and drops from the cache what is written back by then, so a file
// being written holds a few chunks of the cache, whatever its size.
//
// That spares the memory of everything else the node has cached (the model
// it serves while it pulls the next). And on a virtual machine whose host
// takes back the memory its guest frees (virtio-balloon free page
// reporting), the pages a write drops are the next write's, still backed,
// where an import that filled the cache would spend most of its system time
// faulting fresh pages in from the host. A file written in order writes
// its whole pages by direct I/O where it can (direct.go): what passes
// through the cache is what direct I/O does not take.
//
// A finished file is dropped whole after its fsync (dropCached): the first
// read of a new artifact comes from the disk.

// writebackChunk is how many written bytes of a file its writer lets
// accumulate before the next writeBehind.
const writebackChunk = 8 << 20

// writeBehind drops from the page cache the pages of the file's first
// dropEnd bytes that are written back by now, and starts the writeback of
// [off, end). It waits for nothing: a page still dirty or under writeback
// stays cached until a later call, or dropCached. Both are hints; the errors
// of the writeback surface at the fsync.
func writeBehind(f *os.File, dropEnd, off, end int64) {
	fd := int(f.Fd())
	if dropEnd > 0 { // a length of 0 would mean the whole file
		unix.Fadvise(fd, 0, dropEnd, unix.FADV_DONTNEED)
	}
	unix.SyncFileRange(fd, off, end-off, unix.SYNC_FILE_RANGE_WRITE)
}

// dropCached drops a file that was fsynced from the page cache.
func dropCached(f *os.File) {
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
