package staging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Copies read and write copyChunk bytes at a time, with up to copyReaders
// chunks of one file in flight. Across filesystems copy_file_range fails
// with EXDEV and io.Copy falls back to 32 KiB buffers; on a network
// filesystem each read is a round trip, so several big reads in flight are
// what keeps the link busy. Chunks of 1 MiB stay in the CPU's caches from
// the read to the write and the hash, which larger ones do not.
const (
	copyChunk   = 1 << 20
	copyReaders = 8
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyChunk); return &b }}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }

// copyRange copies the n bytes at off in src to the same offset of dst,
// with up to copyReaders chunks read and written at once. If h is set it
// gets the bytes in order (the copy never waits for more than two chunks
// behind the hasher). progress, if set, must be safe for concurrent use.
// direct, if set, is dst opened with O_DIRECT (openDirect): each chunk
// aligned to directAlign in offset, length and memory is written through it,
// straight to the disk, the rest through dst's page cache.
func copyRange(ctx context.Context, src, dst, direct *os.File, off, n int64, h io.Writer, progress func(int64)) error {
	chunks := (n + copyChunk - 1) / copyChunk
	if chunks == 0 {
		return nil
	}
	readers := int(min(copyReaders, chunks))
	slots := readers
	if h != nil {
		slots += 2
	}
	bufs := make([]*[]byte, slots)
	free := make([]chan struct{}, slots) // a token: the slot's buffer may be filled
	ready := make([]chan int, slots)     // a filled slot's length, for the hasher
	for i := range slots {
		bufs[i] = getBuf()
		free[i] = make(chan struct{}, 1)
		free[i] <- struct{}{}
		ready[i] = make(chan int, 1)
	}
	defer func() {
		for _, b := range bufs {
			putBuf(b)
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	// Chunks go to the readers in order, each once its slot is free: the
	// hasher takes chunk i from slot i % slots, so a later chunk must never
	// take a slot before an earlier one (a reader descheduled between
	// taking its chunk and its slot once let one do so, and the hash saw the
	// chunks out of order).
	todo := make(chan int64)
	g.Go(func() error {
		defer close(todo)
		for i := range chunks {
			select {
			case <-free[i%int64(slots)]:
			case <-gctx.Done():
				return context.Cause(gctx)
			}
			select {
			case todo <- i:
			case <-gctx.Done():
				return context.Cause(gctx)
			}
		}
		return nil
	})
	for range readers {
		g.Go(func() error {
			for i := range todo {
				s := i % int64(slots)
				at := off + i*copyChunk
				b := (*bufs[s])[:min(copyChunk, off+n-at)]
				if err := readFullAt(src, b, at); err != nil {
					return fmt.Errorf("read %s at %d: %w", src.Name(), at, err)
				}
				if err := writeChunk(dst, direct, b, at); err != nil {
					return err
				}
				if progress != nil {
					progress(int64(len(b)))
				}
				if h == nil {
					free[s] <- struct{}{}
				} else {
					ready[s] <- len(b)
				}
			}
			return nil
		})
	}
	if h != nil {
		g.Go(func() error {
			for i := range chunks {
				s := i % int64(slots)
				select {
				case k := <-ready[s]:
					h.Write((*bufs[s])[:k])
					free[s] <- struct{}{}
				case <-gctx.Done():
					return context.Cause(gctx)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// directAlign is the alignment of the chunks written with O_DIRECT: a
// page, which covers every logical block size.
const directAlign = 4096

// openDirect opens the file at p again for writing with O_DIRECT, or
// returns nil where its filesystem does not take it.
func openDirect(p string) *os.File {
	f, err := os.OpenFile(p, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	return f
}

// writeChunk writes b at off: through direct where it is aligned, so the
// copy neither copies it into the page cache nor waits for it to be written
// back (a direct write that fails with EINVAL is written again buffered);
// else through dst, starting its writeback at once, so the copy and the
// disk work at once and the syncfs that makes it durable waits for little
// (a hint: errors surface at that syncfs).
func writeChunk(dst, direct *os.File, b []byte, off int64) error {
	if direct != nil && off%directAlign == 0 && len(b)%directAlign == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign == 0 {
		_, err := artifact.WriteAt(direct, b, off)
		if !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	if _, err := artifact.WriteAt(dst, b, off); err != nil {
		return err
	}
	unix.SyncFileRange(int(dst.Fd()), off, int64(len(b)), unix.SYNC_FILE_RANGE_WRITE)
	return nil
}

// dropCache tells the kernel the n bytes at off of f are not needed again:
// the source's pages go, so staging does not push the node's working set
// out of the page cache.
func dropCache(f *os.File, off, n int64) {
	unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}

// tmpSuffix names the file a staged file is written to before it is
// verified and renamed into place. It ends in .incomplete, as hub cache
// downloads in flight do, so hub tools and mirrors of the destination skip
// it, but differs from huggingface_hub's own temp names.
const tmpSuffix = ".staging.incomplete"

// createTemp creates (or truncates) the file a staged file is written to
// before it is renamed into place, sized to size (preallocated when sparse
// is false).
func createTemp(p string, size int64, mode os.FileMode, sparse bool) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, mode.Perm()|0o200)
	if err != nil {
		return nil, err
	}
	if size > 0 {
		err = f.Truncate(size)
		if err == nil && !sparse {
			if e := unix.Fallocate(int(f.Fd()), 0, 0, size); e != nil && e != unix.EOPNOTSUPP {
				err = e
			}
		}
		if err != nil {
			f.Close()
			os.Remove(p)
			return nil, fmt.Errorf("allocate %d bytes for %s: %w", size, p, err)
		}
	}
	return f, nil
}
