package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/zeebo/blake3"
)

// FileHasher computes a payload file's FileEntry from its bytes written in
// order: sha256 and BLAKE3 of the whole file and, for safetensors files, the
// BLAKE3 of the header region and of every tensor. The two whole-file hashes
// run in lanes of their own, overlapped with the per-tensor hashing, so one
// Write keeps every core busy.
type FileHasher struct {
	entry FileEntry
	sha   hash.Hash
	file  *blake3.Hasher
	part  *blake3.Hasher // header region, then the current tensor

	safetensors bool
	prefix      []byte // buffered header bytes until the header is parsed
	header      *Header
	next        int // index of the tensor being hashed
	pos         int64
	err         error

	lanes [2]lane // sha256 and the file's BLAKE3
	once  sync.Once
}

// lane runs one hash on a goroutine of its own, a buffer at a time.
type lane struct {
	in  chan []byte
	out chan struct{}
}

func startLane(w io.Writer) lane {
	l := lane{in: make(chan []byte), out: make(chan struct{})}
	go func() {
		for p := range l.in {
			w.Write(p)
			l.out <- struct{}{}
		}
	}()
	return l
}

// NewFileHasher hashes a file of exactly size bytes stored at path.
func NewFileHasher(path string, size int64) *FileHasher {
	h := &FileHasher{
		entry:       FileEntry{Path: path, Size: size},
		sha:         sha256.New(),
		file:        blake3.New(),
		part:        blake3.New(),
		safetensors: IsSafetensors(path),
	}
	h.lanes = [2]lane{startLane(h.sha), startLane(h.file)}
	return h
}

// Write hashes the next bytes of the file. It returns an error once the bytes
// exceed the declared size or the safetensors header is malformed.
func (h *FileHasher) Write(p []byte) (int, error) {
	if h.err != nil {
		return 0, h.err
	}
	if int64(len(p)) > h.entry.Size-h.pos {
		h.err = fmt.Errorf("hash %s: more than the declared %d bytes", h.entry.Path, h.entry.Size)
		return 0, h.err
	}
	for _, l := range h.lanes {
		l.in <- p
	}
	err := h.hashParts(p)
	for _, l := range h.lanes {
		<-l.out
	}
	if err != nil {
		h.err = err
		return 0, err
	}
	return len(p), nil
}

// hashParts feeds the header and tensor hashers; p starts at h.pos.
func (h *FileHasher) hashParts(p []byte) error {
	if !h.safetensors {
		h.pos += int64(len(p))
		return nil
	}
	for len(p) > 0 {
		if h.header == nil {
			n, err := h.bufferHeader(p)
			if err != nil {
				return err
			}
			p = p[n:]
			continue
		}
		// Consume up to the end of the current region: the header, or tensor h.next.
		end := h.entry.Size
		if h.next < len(h.header.Tensors) {
			end = h.header.DataStart() + h.header.Tensors[h.next].End
		}
		take := int64(len(p))
		if rest := end - h.pos; take > rest {
			take = rest
		}
		h.part.Write(p[:take])
		h.pos += take
		p = p[take:]
		h.closeRegions()
	}
	return nil
}

// bufferHeader collects the length prefix and JSON header, parses it once it
// is complete, and hashes the header region. It returns how much of p it took.
func (h *FileHasher) bufferHeader(p []byte) (int, error) {
	want := int64(8)
	lengthKnown := len(h.prefix) >= 8
	if lengthKnown {
		n := int64(leUint64(h.prefix[:8]))
		if n > MaxHeaderLen || 8+n > h.entry.Size {
			_, err := ReadHeader(prefixReader(h.prefix), h.entry.Size)
			return 0, err
		}
		want = 8 + n
	}
	take := min(want-int64(len(h.prefix)), int64(len(p)))
	h.prefix = append(h.prefix, p[:take]...)
	h.pos += take
	if !lengthKnown || int64(len(h.prefix)) < want {
		return int(take), nil
	}
	hdr, err := ReadHeader(prefixReader(h.prefix), h.entry.Size)
	if err != nil {
		return 0, fmt.Errorf("hash %s: %w", h.entry.Path, err)
	}
	h.header = hdr
	h.entry.DataStart = hdr.DataStart()
	h.entry.Tensors = make([]TensorEntry, len(hdr.Tensors))
	for i, t := range hdr.Tensors {
		h.entry.Tensors[i] = TensorEntry{Name: t.Name, DType: t.DType, Shape: t.Shape,
			Offset: hdr.DataStart() + t.Begin, Length: t.End - t.Begin}
	}
	h.part.Write(h.prefix)
	h.prefix = nil
	h.entry.HeaderBLAKE3 = sumHex(h.part)
	h.part.Reset()
	h.closeRegions()
	return int(take), nil
}

// closeRegions finalizes every tensor that ends at h.pos (zero-length ones included).
func (h *FileHasher) closeRegions() {
	for h.next < len(h.header.Tensors) && h.header.DataStart()+h.header.Tensors[h.next].End <= h.pos {
		h.entry.Tensors[h.next].BLAKE3 = sumHex(h.part)
		h.part.Reset()
		h.next++
	}
}

// Sum returns the finished entry; it fails if fewer bytes than declared were written.
func (h *FileHasher) Sum() (FileEntry, error) {
	h.stop()
	if h.err != nil {
		return FileEntry{}, h.err
	}
	if h.pos != h.entry.Size {
		return FileEntry{}, fmt.Errorf("hash %s: %d of %d bytes written", h.entry.Path, h.pos, h.entry.Size)
	}
	if h.safetensors && h.header == nil {
		_, err := ReadHeader(prefixReader(h.prefix), h.entry.Size)
		return FileEntry{}, fmt.Errorf("hash %s: %w", h.entry.Path, err)
	}
	h.entry.SHA256 = hex.EncodeToString(h.sha.Sum(nil))
	h.entry.BLAKE3 = sumHex(h.file)
	return h.entry, nil
}

// Abort releases the hasher's goroutine without a result.
func (h *FileHasher) Abort() { h.stop() }

func (h *FileHasher) stop() {
	h.once.Do(func() {
		for _, l := range h.lanes {
			close(l.in)
		}
	})
}

// HashFile computes the FileEntry of a file by reading it in order.
func HashFile(r io.ReaderAt, path string, size int64) (FileEntry, error) {
	h := NewFileHasher(path, size)
	buf := make([]byte, 4<<20)
	_, err := io.CopyBuffer(h, io.NewSectionReader(r, 0, size), buf)
	if err != nil {
		h.Abort()
		return FileEntry{}, err
	}
	return h.Sum()
}

func sumHex(h *blake3.Hasher) string {
	var sum [32]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// BLAKE3Hex returns the hex BLAKE3 of b.
func BLAKE3Hex(b []byte) string {
	sum := blake3.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func leUint64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// prefixReader serves the buffered start of a file to ReadHeader.
type prefixReader []byte

var errPastPrefix = errors.New("read past the buffered header")

func (p prefixReader) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(b)) > int64(len(p)) {
		return 0, errPastPrefix
	}
	return copy(b, p[off:]), nil
}
