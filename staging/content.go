package staging

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"regexp"
	"strconv"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"golang.org/x/sys/unix"
)

var gitSHA1NameRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// blobHash is the hash a hub blob's name is: sha256 of the content for a
// 64-hex name (LFS and Xet files), the git blob sha1 (sha1 of
// "blob <len>\0" + content) for a 40-hex name. ok is false for other names.
func blobHash(name string, size int64) (h hash.Hash, algo string, ok bool) {
	switch {
	case artifact.IsSHA256Hex(name):
		return sha256.New(), "sha256", true
	case gitSHA1NameRE.MatchString(name):
		h := sha1.New()
		h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
		return h, "gitsha1", true
	}
	return nil, "", false
}

// Sampling: a range of up to sampleWhole bytes is hashed whole; a longer
// one by sampleRanges ranges of sampleChunk bytes (its first and last and
// evenly spaced ones between), 512 KiB in all.
const (
	sampleWhole  = 1 << 20
	sampleChunk  = 64 << 10
	sampleRanges = 8
)

// sampleSpans lists the [offset, length) pairs sampleHash reads of the n
// bytes at off.
func sampleSpans(off, n int64) [][2]int64 {
	if n <= sampleWhole {
		return [][2]int64{{off, n}}
	}
	spans := make([][2]int64, 0, sampleRanges)
	last := n - sampleChunk
	for i := int64(0); i < sampleRanges; i++ {
		o := last * i / (sampleRanges - 1)
		if i != 0 && i != sampleRanges-1 {
			o &^= 4095
		}
		spans = append(spans, [2]int64{off + o, sampleChunk})
	}
	return spans
}

// sampleHash's hashers and read buffers, pooled: a no-op re-run samples
// every staged file, and each hasher holds a 16 KiB buffer. A sampled range
// is read sampleChunk bytes at a time (a whole file of up to sampleWhole in
// several reads): most files sampled are small, and a copy's 1 MiB buffer
// per file was most of what a no-op re-run allocated.
var (
	hasherPool    = sync.Pool{New: func() any { return blake3.New() }}
	sampleBufPool = sync.Pool{New: func() any { b := make([]byte, sampleChunk); return &b }}
)

// sampleHash is the hex BLAKE3 of n and of the sampled ranges of the n
// bytes at off in r, with their offsets: equal for equal content, and
// different for most changes (every change of a range up to 1 MiB).
func sampleHash(r io.ReaderAt, off, n int64) (string, error) {
	h := hasherPool.Get().(*blake3.Hasher)
	defer hasherPool.Put(h)
	h.Reset()
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], uint64(n))
	h.Write(le[:])
	bp := sampleBufPool.Get().(*[]byte)
	defer sampleBufPool.Put(bp)
	for _, s := range sampleSpans(off, n) {
		binary.LittleEndian.PutUint64(le[:], uint64(s[0]-off))
		h.Write(le[:])
		for done := int64(0); done < s[1]; {
			b := (*bp)[:min(int64(len(*bp)), s[1]-done)]
			if err := readFullAt(r, b, s[0]+done); err != nil {
				return "", err
			}
			h.Write(b)
			done += int64(len(b))
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sampleFile is sampleHash of a whole file, checking its size first. It
// makes the system calls itself (open, fstat, pread, close: no poller
// registration), as a no-op re-run does this once per staged file.
func sampleFile(p string, size int64) (string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Size != size {
		return "", errChanged(p, "size %d, want %d", st.Size, size)
	}
	return sampleHash(fdReader(fd), 0, size)
}

// fdReader reads a file descriptor with pread.
type fdReader int

func (fd fdReader) ReadAt(b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Pread(int(fd), b[done:], off+int64(done))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return done, err
		case n == 0:
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// readFullAt reads len(b) bytes at off; a short read is io.ErrUnexpectedEOF.
func readFullAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// hashRange feeds the n bytes at off in f to h.
func hashRange(ctx context.Context, f io.ReaderAt, off, n int64, h io.Writer) error {
	bp := getBuf()
	defer putBuf(bp)
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := (*bp)[:min(int64(len(*bp)), n-done)]
		if err := readFullAt(f, b, off+done); err != nil {
			return err
		}
		h.Write(b)
		done += int64(len(b))
	}
	return nil
}

// sameBytes compares the n bytes at off in a and b, feeding a's to h if set.
func sameBytes(ctx context.Context, a, b io.ReaderAt, off, n int64, h io.Writer) (bool, error) {
	ap, bp := getBuf(), getBuf()
	defer putBuf(ap)
	defer putBuf(bp)
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		k := min(int64(len(*ap)), n-done)
		x, y := (*ap)[:k], (*bp)[:k]
		if err := readFullAt(a, x, off+done); err != nil {
			return false, err
		}
		if err := readFullAt(b, y, off+done); err != nil {
			return false, err
		}
		if string(x) != string(y) {
			return false, nil
		}
		if h != nil {
			h.Write(x)
		}
		done += k
	}
	return true, nil
}

// errChanged says a source changed while it was staged, or since the plan
// listed it: staging stopped, a re-run can succeed.
func errChanged(path, format string, args ...any) error {
	return fmt.Errorf("source %s changed: %s: %w", path, fmt.Sprintf(format, args...), errdefs.ErrAborted)
}

// mismatch is staged content that does not match what it must be: a hub
// blob whose bytes are not its name, or a copy unlike its source. Nothing
// of it is installed. repo is the hub repository of a hub-mirror lane ("" for
// others), path the source file, what "blob <name>", "file" or "rows of
// <table>". It is classified errdefs.ErrDataLoss.
func mismatch(lane, repo, path, what, want, got string) error {
	s := "lane " + lane + ": "
	if repo != "" {
		s += "repo " + repo + ": "
	}
	return fmt.Errorf("%s%s (%s): %s, want %s: refused: %w", s, what, path, got, want, errdefs.ErrDataLoss)
}
