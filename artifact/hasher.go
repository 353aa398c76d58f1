package artifact

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// FileHasher computes a payload file's FileEntry from its bytes written in
// order, each byte hashed once per digest computed. What it computes
// depends on the Binding:
//   - BindNone: the sha256 of the file and the BLAKE3 of the safetensors
//     header region and of every tensor, whose tree is the file's BLAKE3
//     (any other file gets the BLAKE3 of its whole bytes). The sha256 runs
//     on a lane of its own, overlapped with the BLAKE3, so one Write keeps
//     two cores busy.
//   - BindTree: the BLAKE3 values (a kept file of a peer fetch, read once);
//     the sha256 comes from the record (with CheckSHA256 it is computed
//     too, and must equal the record's).
//   - BindTreeStream: the BLAKE3 values, each tensor checked against the
//     record as it ends; the sha256 comes from the record.
type FileHasher struct {
	b      Binding
	entry  FileEntry
	sha    hash.Hash      // BindNone's, nil otherwise
	lane   *lane          // runs sha while part runs
	part   *blake3.Hasher // the header region, then the current tensor (or the whole file)
	verify bool           // each tensor is checked against the record as it ends (BindTreeStream)

	safetensors bool
	prefix      []byte // buffered header bytes until the header is parsed
	header      *Header
	headerSum   Sum
	sums        []Sum // per tensor, as each one ends
	next        int   // index of the tensor being hashed
	pos         int64
	checked     atomic.Int64 // see Checked
	err         error
	once        sync.Once
}

// lane runs one hash on a goroutine of its own, a buffer at a time.
type lane struct {
	in  chan []byte
	out chan struct{}
}

func startLane(w io.Writer) *lane {
	l := &lane{in: make(chan []byte), out: make(chan struct{})}
	go func() {
		for p := range l.in {
			w.Write(p)
			l.out <- struct{}{}
		}
	}()
	return l
}

// NewFileHasher hashes a file of exactly b.Want.Size bytes stored at
// b.Want.Path under the binding b.
func NewFileHasher(b Binding) (*FileHasher, error) {
	if err := checkBinding(b); err != nil {
		return nil, err
	}
	if b.Want.Size < 0 {
		return nil, fmt.Errorf("hash %s: negative size: %w", b.Want.Path, errdefs.ErrInvalidArgument)
	}
	h := &FileHasher{
		b:           b,
		entry:       FileEntry{File: File{Path: b.Want.Path, Size: b.Want.Size}},
		part:        blake3.New(),
		verify:      b.By == BindTreeStream,
		safetensors: IsSafetensors(b.Want.Path),
	}
	if b.By == BindNone || b.CheckSHA256 {
		h.sha = sha256.New()
		h.lane = startLane(h.sha)
	}
	return h, nil
}

// Write hashes the next bytes of the file. It returns an error once the bytes
// exceed the declared size, the safetensors header is malformed, or the
// header disagrees with the record the file is bound to.
func (h *FileHasher) Write(p []byte) (int, error) {
	if h.err != nil {
		return 0, h.err
	}
	if int64(len(p)) > h.entry.Size-h.pos {
		h.err = fmt.Errorf("hash %s: more than the declared %d bytes: %w", h.entry.Path, h.entry.Size, errdefs.ErrOutOfRange)
		return 0, h.err
	}
	if h.lane != nil {
		h.lane.in <- p
	}
	err := h.hashParts(p)
	if h.lane != nil {
		<-h.lane.out
	}
	if err != nil {
		h.err = err
		return 0, err
	}
	return len(p), nil
}

// hashParts feeds the header and tensor hashes; p starts at h.pos.
func (h *FileHasher) hashParts(p []byte) error {
	for len(p) > 0 {
		if h.safetensors && h.header == nil {
			n, err := h.bufferHeader(p)
			if err != nil {
				return err
			}
			p = p[n:]
			continue
		}
		// Up to the end of the current region: tensor h.next, or the file.
		end := h.entry.Size
		if h.safetensors && h.next < len(h.header.Tensors) {
			end = h.header.DataStart() + h.header.Tensors[h.next].End
		}
		take := min(int64(len(p)), end-h.pos)
		h.part.Write(p[:take])
		h.pos += take
		p = p[take:]
		if h.safetensors {
			if err := h.closeTensors(); err != nil {
				return err
			}
		}
	}
	return nil
}

// bufferHeader collects the length prefix and the JSON header; once both
// are complete it parses them (parseHeader). It returns how much of p it took.
func (h *FileHasher) bufferHeader(p []byte) (int, error) {
	taken := 0
	for {
		need := 8
		if len(h.prefix) >= 8 {
			// Untrusted: compared as unsigned before it is converted.
			n := binary.LittleEndian.Uint64(h.prefix[:8])
			if n > MaxHeaderLen || n > uint64(h.entry.Size-8) {
				_, err := ReadHeader(prefixReader(h.prefix), h.entry.Size)
				return taken, fmt.Errorf("hash %s: %w", h.entry.Path, err)
			}
			need = 8 + int(n)
			if len(h.prefix) == need {
				return taken, h.parseHeader()
			}
		}
		if len(p) == 0 {
			return taken, nil
		}
		k := min(need-len(h.prefix), len(p))
		h.prefix = append(h.prefix, p[:k]...)
		h.pos += int64(k)
		taken += k
		p = p[k:]
	}
}

// parseHeader parses the buffered header, hashes the header region and,
// for a bound file, checks both against the record.
func (h *FileHasher) parseHeader() error {
	hdr, err := ReadHeader(prefixReader(h.prefix), h.entry.Size)
	if err != nil {
		return fmt.Errorf("hash %s: %w", h.entry.Path, err)
	}
	h.header = hdr
	h.entry.DataStart = hdr.DataStart()
	h.entry.Tensors = tensorEntries(hdr)
	h.headerSum = blake3.Sum256(h.prefix)
	h.entry.HeaderBLAKE3 = SumHex(h.headerSum)
	h.prefix = nil
	if h.b.By != BindNone {
		if err := checkHeader(h.b.Want, h.entry); err != nil {
			return err
		}
	}
	if h.verify {
		h.checked.Store(h.entry.DataStart)
	}
	h.sums = make([]Sum, 0, len(hdr.Tensors))
	return h.closeTensors()
}

// tensorEntries are the index entries of a header's tensors, without digests.
func tensorEntries(hdr *Header) []TensorEntry {
	out := make([]TensorEntry, len(hdr.Tensors))
	for i, t := range hdr.Tensors {
		out[i] = TensorEntry{Name: t.Name, DType: t.DType, Shape: t.Shape,
			Offset: hdr.DataStart() + t.Begin, Length: t.End - t.Begin}
	}
	return out
}

// checkHeader checks a parsed header region against the record it is bound to.
func checkHeader(want, got FileEntry) error {
	if err := compareTable(want, got); err != nil {
		return err
	}
	if want.HeaderBLAKE3 != got.HeaderBLAKE3 {
		return &EntryMismatchError{Path: want.Path, Field: "header_blake3", Want: want.HeaderBLAKE3, Got: got.HeaderBLAKE3}
	}
	return nil
}

// closeTensors finishes every tensor that ends at h.pos (empty ones
// included); under verify each must equal the record's.
func (h *FileHasher) closeTensors() error {
	for h.next < len(h.header.Tensors) && h.header.DataStart()+h.header.Tensors[h.next].End <= h.pos {
		var sum Sum
		h.part.Sum(sum[:0])
		h.part.Reset()
		h.sums = append(h.sums, sum)
		t := &h.entry.Tensors[h.next]
		t.BLAKE3 = SumHex(sum)
		h.next++
		if h.verify {
			if w := h.b.Want.Tensors[h.next-1]; w.BLAKE3 != t.BLAKE3 {
				return &EntryMismatchError{Path: h.entry.Path, Tensor: w.Name, Field: "blake3", Want: w.BLAKE3, Got: t.BLAKE3}
			}
			h.checked.Store(t.Offset + t.Length)
		}
	}
	return nil
}

// Checked is how far the bytes written are checked against the record, as
// [0, Checked()): under BindTreeStream the header region once it checks
// and every tensor as it checks; 0 otherwise (a BindTree file is checked
// by its producer, part by part). Safe to call from another goroutine
// while Write runs.
func (h *FileHasher) Checked() int64 { return h.checked.Load() }

// Sum returns the finished entry; it fails if fewer bytes than declared were
// written, or if the bytes disagree with the record they are bound to.
func (h *FileHasher) Sum() (FileEntry, error) {
	h.stop()
	if h.err != nil {
		return FileEntry{}, h.err
	}
	if h.pos != h.entry.Size {
		return FileEntry{}, fmt.Errorf("hash %s: %d of %d bytes written: %w", h.entry.Path, h.pos, h.entry.Size, errdefs.ErrFailedPrecondition)
	}
	if h.safetensors && h.header == nil {
		_, err := ReadHeader(prefixReader(h.prefix), h.entry.Size)
		return FileEntry{}, fmt.Errorf("hash %s: %w", h.entry.Path, err)
	}
	e := h.entry
	if h.sha != nil {
		e.SHA256 = hex.EncodeToString(h.sha.Sum(nil))
	}
	if h.safetensors {
		e.BLAKE3 = SumHex(TreeBLAKE3(h.headerSum, h.sums))
	} else {
		e.BLAKE3 = sumHex(h.part)
	}
	if h.b.By == BindNone {
		return e, nil
	}
	return bindTree(h.b.Want, e)
}

// bindTree checks the tree computed from a file's bytes against the record
// and binds the record's sha256 to the bytes: got's, when it was computed
// too (Binding.CheckSHA256), must equal it.
func bindTree(want, got FileEntry) (FileEntry, error) {
	for i, w := range want.Tensors {
		if g := got.Tensors[i]; w.BLAKE3 != g.BLAKE3 {
			return FileEntry{}, &EntryMismatchError{Path: want.Path, Tensor: w.Name, Field: "blake3", Want: w.BLAKE3, Got: g.BLAKE3}
		}
	}
	if want.BLAKE3 != got.BLAKE3 {
		return FileEntry{}, &EntryMismatchError{Path: want.Path, Field: "blake3", Want: want.BLAKE3, Got: got.BLAKE3}
	}
	if got.SHA256 != "" && got.SHA256 != want.SHA256 {
		return FileEntry{}, &EntryMismatchError{Path: want.Path, Field: "sha256", Want: want.SHA256, Got: got.SHA256}
	}
	got.SHA256 = want.SHA256
	return got, nil
}

// FinishTree completes a BindTree file written out of order, without
// reading it: header holds the bytes written to [0, want.DataStart) (empty
// for a file that is not safetensors) and parts the BLAKE3 the producer
// reported for each part (a zero digest is one never reported).
func FinishTree(want FileEntry, header []byte, parts []Sum) (FileEntry, error) {
	got := FileEntry{File: File{Path: want.Path, Size: want.Size}}
	missing := func(what string) error {
		return fmt.Errorf("file %s: no BLAKE3 reported for %s: %w", want.Path, what, errdefs.ErrFailedPrecondition)
	}
	if len(parts) != want.Parts() {
		return FileEntry{}, fmt.Errorf("file %s: %d parts, want %d: %w", want.Path, len(parts), want.Parts(), errdefs.ErrInvalidArgument)
	}
	if !IsSafetensors(want.Path) {
		if parts[0] == (Sum{}) {
			return FileEntry{}, missing("the file")
		}
		got.BLAKE3 = SumHex(parts[0])
		return bindTree(want, got)
	}
	hdr, err := ReadHeader(prefixReader(header), want.Size)
	if errors.Is(err, errPastPrefix) {
		return FileEntry{}, &EntryMismatchError{Path: want.Path, Field: "data_start", Want: fmt.Sprint(want.DataStart), Got: "a longer header"}
	}
	if err != nil {
		return FileEntry{}, fmt.Errorf("file %s: %w", want.Path, err)
	}
	got.DataStart, got.Tensors = hdr.DataStart(), tensorEntries(hdr)
	headerSum := blake3.Sum256(header)
	got.HeaderBLAKE3 = SumHex(headerSum)
	if err := checkHeader(want, got); err != nil {
		return FileEntry{}, err
	}
	for i, p := range parts {
		if p == (Sum{}) {
			return FileEntry{}, missing("tensor " + got.Tensors[i].Name)
		}
		got.Tensors[i].BLAKE3 = SumHex(p)
	}
	got.BLAKE3 = SumHex(TreeBLAKE3(headerSum, parts))
	return bindTree(want, got)
}

// Abort stops the hasher's goroutine without a result.
func (h *FileHasher) Abort() { h.stop() }

func (h *FileHasher) stop() {
	h.once.Do(func() {
		if h.lane != nil {
			close(h.lane.in)
		}
	})
}

// HashFile computes the FileEntry of a file under the binding b by reading
// it once, in order.
func HashFile(r io.ReaderAt, b Binding) (FileEntry, error) {
	h, err := NewFileHasher(b)
	if err != nil {
		return FileEntry{}, err
	}
	buf := make([]byte, 4<<20)
	if _, err := io.CopyBuffer(h, io.NewSectionReader(r, 0, b.Want.Size), buf); err != nil {
		h.Abort()
		return FileEntry{}, err
	}
	return h.Sum()
}

func sumHex(h *blake3.Hasher) string {
	var sum Sum
	h.Sum(sum[:0])
	return SumHex(sum)
}

// BLAKE3Hex returns the hex BLAKE3 of b.
func BLAKE3Hex(b []byte) string {
	sum := blake3.Sum256(b)
	return hex.EncodeToString(sum[:])
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
