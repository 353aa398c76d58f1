package artifact

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
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
//   - BindSHA256: the sha256 and the header region's BLAKE3; the tensor
//     BLAKE3 values come from the record, or with CheckTensors are computed
//     and checked against it as each tensor ends.
//   - BindTree: the BLAKE3 values (a kept file of a peer fetch, read once);
//     the sha256 comes from the record.
type FileHasher struct {
	b       Binding
	entry   FileEntry
	sha     hash.Hash      // nil under BindTree
	lane    *lane          // runs sha while part runs, when both are computed
	part    *blake3.Hasher // the header region, then the current tensor (or the whole file)
	tensors bool           // the tensor bytes are hashed
	verify  bool           // ResumeAt's: each tensor is checked against the record

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
		tensors:     b.By != BindSHA256 || (b.CheckTensors && IsSafetensors(b.Want.Path)),
		safetensors: IsSafetensors(b.Want.Path),
	}
	if b.By != BindTree {
		h.sha = sha256.New()
	}
	if h.sha != nil && h.tensors {
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
	switch {
	case h.lane != nil:
		h.lane.in <- p
	case h.sha != nil:
		h.sha.Write(p)
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
		if h.tensors {
			h.part.Write(p[:take])
		}
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
	if !h.tensors { // BindSHA256: the record's tensor digests, bound by the sha256
		for i := range h.entry.Tensors {
			h.entry.Tensors[i].BLAKE3 = h.b.Want.Tensors[i].BLAKE3
		}
		h.next = len(hdr.Tensors)
	}
	if h.b.By == BindSHA256 {
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
// included); under CheckTensors each must equal the record's.
func (h *FileHasher) closeTensors() error {
	for h.next < len(h.header.Tensors) && h.header.DataStart()+h.header.Tensors[h.next].End <= h.pos {
		var sum Sum
		h.part.Sum(sum[:0])
		h.part.Reset()
		h.sums = append(h.sums, sum)
		t := &h.entry.Tensors[h.next]
		t.BLAKE3 = SumHex(sum)
		h.next++
		if h.b.CheckTensors || h.verify {
			if w := h.b.Want.Tensors[h.next-1]; w.BLAKE3 != t.BLAKE3 {
				return &EntryMismatchError{Path: h.entry.Path, Tensor: w.Name, Field: "blake3", Want: w.BLAKE3, Got: t.BLAKE3}
			}
			h.checked.Store(t.Offset + t.Length)
		}
	}
	return nil
}

// Checked is how far the bytes written are checked against the record, as
// [0, Checked()): under BindSHA256 the header region once it checks and,
// with CheckTensors, every tensor as it checks; 0 otherwise (a BindTree
// file is checked by its producer, part by part). Safe to call from
// another goroutine while Write runs.
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
	switch {
	case h.b.By == BindSHA256:
		if e.SHA256 != h.b.Want.SHA256 {
			return FileEntry{}, &EntryMismatchError{Path: e.Path, Field: "sha256", Want: h.b.Want.SHA256, Got: e.SHA256}
		}
		e.BLAKE3 = h.b.Want.BLAKE3
		return e, nil
	case h.safetensors:
		e.BLAKE3 = SumHex(TreeBLAKE3(h.headerSum, h.sums))
	default:
		e.BLAKE3 = sumHex(h.part)
	}
	if h.b.By == BindTree {
		return bindTree(h.b.Want, e)
	}
	return e, nil
}

// bindTree checks the tree computed from a file's bytes against the record
// and binds the record's sha256 to the bytes.
func bindTree(want, got FileEntry) (FileEntry, error) {
	for i, w := range want.Tensors {
		if g := got.Tensors[i]; w.BLAKE3 != g.BLAKE3 {
			return FileEntry{}, &EntryMismatchError{Path: want.Path, Tensor: w.Name, Field: "blake3", Want: w.BLAKE3, Got: g.BLAKE3}
		}
	}
	if want.BLAKE3 != got.BLAKE3 {
		return FileEntry{}, &EntryMismatchError{Path: want.Path, Field: "blake3", Want: want.BLAKE3, Got: got.BLAKE3}
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

// MaxStateLen bounds a marshalled sha256 state (State): Go's is 108 bytes.
const MaxStateLen = 256

// Resumable says whether a file hashed under b can be continued from a
// kept prefix (State, ResumeAt): a safetensors file bound by its sha256,
// whose header and tensors the record names, so that every byte of the
// prefix is checked again from the disk against the record.
func Resumable(b Binding) bool {
	return b.By == BindSHA256 && IsSafetensors(b.Want.Path)
}

// NextBoundary is where the part the next byte written belongs to ends
// (the header region or a tensor; the file's end after the last tensor),
// for a Resumable file whose header is parsed; 0 otherwise. A writer that
// keeps states splits its writes there (State).
func (h *FileHasher) NextBoundary() int64 {
	if !Resumable(h.b) || h.header == nil {
		return 0
	}
	ds := h.header.DataStart()
	ts := h.header.Tensors
	i := sort.Search(len(ts), func(i int) bool { return ds+ts[i].End > h.pos })
	if i == len(ts) {
		return h.entry.Size
	}
	return ds + ts[i].End
}

// atBoundary says whether the bytes written end where a part does.
func (h *FileHasher) atBoundary() bool {
	if h.header == nil {
		return false
	}
	ds := h.header.DataStart()
	ts := h.header.Tensors
	i := sort.Search(len(ts), func(i int) bool { return ds+ts[i].End >= h.pos })
	return h.pos == ds || (i < len(ts) && ds+ts[i].End == h.pos)
}

// State is how far the hasher is (the bytes [0, off) were written, ending
// where a part ends: NextBoundary) and its sha256 state there, marshalled:
// what ResumeAt needs to continue the file from off without hashing the
// prefix's sha256 again. Call it between two Writes, from the goroutine
// that writes; ok is false for a file that is not Resumable or bytes that
// do not end at a boundary.
func (h *FileHasher) State() (off int64, sha []byte, ok bool) {
	m, can := h.sha.(encoding.BinaryMarshaler)
	if h.err != nil || !can || !Resumable(h.b) || !h.atBoundary() {
		return 0, nil, false
	}
	sha, err := m.MarshalBinary()
	if err != nil || len(sha) > MaxStateLen {
		return 0, nil, false
	}
	return h.pos, sha, true
}

// ResumeAt continues a new hasher of a Resumable file at off, where a part
// ends: the sha256 from the state State gave there, everything else from
// the file's prefix read back from r, which is checked again as it is
// read: the header region against the record's header BLAKE3 and table,
// every tensor against the record's BLAKE3, so no byte of the prefix is
// taken on trust, only the sha256 state (which Sum checks whole against the
// record). Call it before any Write. A prefix that fails its check, or an
// off that is no boundary, is an error; the hasher is then unusable.
func (h *FileHasher) ResumeAt(r io.ReaderAt, off int64, sha []byte) error {
	if h.pos != 0 || h.err != nil {
		return fmt.Errorf("hash %s: resumed after a write: %w", h.entry.Path, errdefs.ErrFailedPrecondition)
	}
	u, ok := h.sha.(encoding.BinaryUnmarshaler)
	if !Resumable(h.b) || !ok {
		return fmt.Errorf("hash %s: not resumable: %w", h.entry.Path, errdefs.ErrNotImplemented)
	}
	if off <= 0 || off > h.entry.Size || len(sha) > MaxStateLen {
		return fmt.Errorf("hash %s: resume at %d of %d bytes (state %d bytes): %w", h.entry.Path, off, h.entry.Size, len(sha), errdefs.ErrOutOfRange)
	}
	if err := u.UnmarshalBinary(sha); err != nil {
		return fmt.Errorf("hash %s: sha256 state: %w: %w", h.entry.Path, err, errdefs.ErrDataLoss)
	}
	// The tensors of the prefix are hashed and checked, whether or not
	// the rest of the file's are.
	skip := !h.tensors
	h.tensors, h.verify = true, true
	buf := make([]byte, min(off, 4<<20))
	for h.pos < off {
		n := min(int64(len(buf)), off-h.pos)
		if h.header == nil {
			// The length prefix, then the header, never read past: the
			// parsed header decides whether its tensors are hashed.
			n = min(n, 8-int64(len(h.prefix)))
			if len(h.prefix) >= 8 {
				// Untrusted: compared as unsigned before it is converted;
				// a length out of bounds fails in bufferHeader.
				n = 1
				if hl := binary.LittleEndian.Uint64(h.prefix[:8]); hl <= MaxHeaderLen {
					n = max(min(int64(len(buf)), off-h.pos, 8+int64(hl)-h.pos), 1)
				}
			}
		}
		if _, err := r.ReadAt(buf[:n], h.pos); err != nil {
			h.err = fmt.Errorf("hash %s: read the kept prefix: %w", h.entry.Path, err)
			return h.err
		}
		if err := h.hashParts(buf[:n]); err != nil {
			h.err = err
			return err
		}
	}
	if !h.atBoundary() {
		h.err = fmt.Errorf("hash %s: resume at %d, where no part ends: %w", h.entry.Path, off, errdefs.ErrDataLoss)
		return h.err
	}
	h.verify = false
	if skip {
		// As parseHeader leaves a file whose tensors are not hashed.
		h.tensors = false
		h.part.Reset()
		for i := range h.entry.Tensors {
			h.entry.Tensors[i].BLAKE3 = h.b.Want.Tensors[i].BLAKE3
		}
		h.next = len(h.header.Tensors)
	}
	return nil
}

// Abort releases the hasher's goroutine without a result.
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
