package store

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directFile is a second descriptor of a payload file, opened with
// O_DIRECT: the disk takes the bytes written through it from the writer's
// buffers, not from the page cache. Such a write copies nothing into the
// cache, leaves nothing to write back, and evicts nothing another file has
// cached (the model a node serves while it pulls the next). On a virtual
// machine whose host takes back the memory its guest frees it also spares a
// fault to the host for every page the cache would have filled: there
// 2 GiB written through the cache cost 5 s of system time, and 0.3 s direct.
//
// Only whole pages are written directly, from page-aligned memory (which
// covers statx's STATX_DIOALIGN on every filesystem that reports one): a
// page of the file that one write covers only in part goes through the
// cache, by the file's own descriptor, and is never also written directly,
// so the two paths never share a page.
type directFile struct {
	f     *os.File
	align int64 // a power of two, at least the page size
}

// openDirect opens f again with O_DIRECT. It returns nil where the
// filesystem does not take direct writes: f alone then writes everything.
func openDirect(f *os.File) *directFile {
	df, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	var st unix.Statx_t
	if err := unix.Statx(int(df.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err != nil ||
		st.Mask&unix.STATX_DIOALIGN == 0 || st.Dio_offset_align == 0 {
		df.Close()
		return nil
	}
	align := int64(max(st.Dio_offset_align, st.Dio_mem_align, uint32(os.Getpagesize())))
	if align&(align-1) != 0 || align > directStage {
		df.Close()
		return nil
	}
	return &directFile{f: df, align: align}
}

// span returns the part p[lo:hi] of p, the bytes at off, that can be
// written directly: the whole pages it covers, if their memory is aligned.
func (d *directFile) span(p []byte, off int64) (lo, hi int64) {
	lo = (d.align - off%d.align) % d.align
	hi = (off+int64(len(p)))&^(d.align-1) - off
	if hi <= lo || int64(uintptr(unsafe.Pointer(&p[lo])))%d.align != 0 {
		return 0, 0
	}
	return lo, hi
}

func (d *directFile) writeAt(p []byte, off int64) error {
	_, err := d.f.WriteAt(p, off)
	return classifyIO(err)
}

// closeDirect closes the file's direct descriptor, once its writes are over.
func (w *fileWriter) closeDirect() {
	if w.dio != nil {
		w.dio.f.Close()
	}
}

const (
	// directStage is the size of the buffers that gather the bytes of an
	// ordered file that cannot be written directly from where they lie.
	directStage = 1 << 20
	// directDepth is how many direct writes of one ordered file may be under
	// way at once. A direct write sleeps until the disk has the bytes, and
	// on a machine whose cores are busy hashing its thread then waits to
	// run again: one at a time, a file was written at a third of the disk's
	// speed.
	directDepth = 4
	// directRing is how many chunks of such a file may be in flight between
	// Write and the hash and write stages: enough to keep directDepth writes
	// under way while the hash stage runs ahead.
	directRing = 8
)

// directWriter is the write stage of an ordered file that can be written
// directly. Bytes that arrive aligned are written from where they lie, up to
// directDepth writes at once; the others are first copied into an aligned
// stage; the file's last partial page goes through the cache when the file
// is finished.
type directWriter struct {
	d    *directFile
	f    *os.File // the file's own descriptor, for the last partial page
	fail func(error)

	ios   chan directIO
	wg    sync.WaitGroup
	spare chan []byte // a stage buffer not being written
	stage []byte      // the one filling, directStage bytes
	held  int         // bytes of stage in use
	at    int64       // the file offset of stage[0]
}

// directIO is one direct write; done is called once it is over.
type directIO struct {
	p    []byte
	off  int64
	done func()
}

func newDirectWriter(d *directFile, f *os.File, fail func(error)) *directWriter {
	w := &directWriter{d: d, f: f, fail: fail, ios: make(chan directIO), spare: make(chan []byte, 1),
		stage: alignedBuffer(directStage, int(d.align))}
	w.spare <- alignedBuffer(directStage, int(d.align))
	for range directDepth {
		w.wg.Go(func() {
			for io := range w.ios {
				if err := d.writeAt(io.p, io.off); err != nil {
					w.fail(err)
				}
				io.done()
			}
		})
	}
	return w
}

// alignedBuffer returns n bytes whose first lies at a multiple of align.
func alignedBuffer(n, align int) []byte {
	b := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(&b[0])))%align) % align
	return b[skip : skip+n : skip+n]
}

// writeAt starts writing p, the bytes at off, where the previous call's
// ended, and calls done once p is no longer needed.
func (w *directWriter) writeAt(p []byte, off int64, done func()) {
	for len(p) > 0 {
		if w.held == 0 {
			if lo, hi := w.d.span(p, off); lo == 0 && hi > 0 {
				w.at = off + hi
				w.held = copy(w.stage, p[hi:]) // less than a page
				w.ios <- directIO{p[:hi], off, done}
				return
			}
			w.at = off
		}
		k := copy(w.stage[w.held:], p)
		w.held += k
		p, off = p[k:], off+int64(k)
		if w.held == len(w.stage) {
			w.writeStage()
		}
	}
	done()
}

// writeStage starts writing the stage's whole pages and moves the rest to
// the start of the spare stage.
func (w *directWriter) writeStage() {
	n := int64(w.held) &^ (w.d.align - 1)
	if n == 0 {
		return
	}
	full, next := w.stage, <-w.spare
	w.held = copy(next, full[n:w.held])
	w.stage = next
	w.ios <- directIO{full[:n], w.at, func() { w.spare <- full }}
	w.at += n
}

// finish writes what is still held, waits for every write, and returns the
// first failure.
func (w *directWriter) finish(failed func() error) error {
	w.writeStage()
	close(w.ios)
	w.wg.Wait()
	if err := failed(); err != nil || w.held == 0 {
		return err
	}
	_, err := pwrite(w.f, w.stage[:w.held], w.at)
	return err
}
