package staging

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

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
func copyRange(ctx context.Context, src, dst *os.File, off, n int64, h io.Writer, progress func(int64)) error {
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
				if _, err := artifact.WriteAt(dst, b, at); err != nil {
					return err
				}
				// Start the chunk's writeback now, so the copy and the
				// disk work at once and the syncfs that makes it durable
				// waits for little. A hint: errors surface at that syncfs.
				unix.SyncFileRange(int(dst.Fd()), at, int64(len(b)), unix.SYNC_FILE_RANGE_WRITE)
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
