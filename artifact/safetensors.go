package artifact

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/containerd/errdefs"
)

// MaxHeaderLen is the largest safetensors JSON header accepted (the reference implementation's cap).
const MaxHeaderLen = 100_000_000

// TensorInfo is one tensor of a safetensors header. Begin and End are offsets
// relative to the data buffer, as in the file.
type TensorInfo struct {
	Name  string
	DType string
	Shape []int64
	Begin int64
	End   int64
}

// Header is a validated safetensors header.
type Header struct {
	// HeaderLen is N, the JSON length; the data buffer starts at 8+N.
	HeaderLen int64
	// Tensors sorted by Begin (then End, so empty tensors sharing a Begin
	// come first, then Name); nil if there are none.
	Tensors []TensorInfo
	// Metadata is __metadata__, nil if absent.
	Metadata map[string]string
}

// DataStart is the file offset of the data buffer.
func (h *Header) DataStart() int64 { return 8 + h.HeaderLen }

// FormatErrorKind classifies a malformed safetensors file.
type FormatErrorKind string

// The kinds of FormatError.
const (
	HeaderTooShort    FormatErrorKind = "header too short"     // file shorter than the 8-byte length prefix
	HeaderTooLarge    FormatErrorKind = "header too large"     // N > MaxHeaderLen
	HeaderPastEOF     FormatErrorKind = "header past EOF"      // 8+N > file size
	HeaderNotJSON     FormatErrorKind = "header not JSON"      // not UTF-8, not JSON, or not starting with '{'
	DuplicateKey      FormatErrorKind = "duplicate key"        // a key repeated in any object
	BadEntry          FormatErrorKind = "bad entry"            // wrong type, missing or unknown field, bad number
	UnknownDType      FormatErrorKind = "unknown dtype"        // dtype not in DTypes()
	OffsetsOutOfOrder FormatErrorKind = "offsets out of order" // hole, overlap, end < begin, first begin != 0
	OutOfFile         FormatErrorKind = "out of file"          // tensor end past the end of the file
	ShapeMismatch     FormatErrorKind = "shape mismatch"       // shape*dtype bits != end-begin, or overflow
	TrailingBytes     FormatErrorKind = "trailing bytes"       // bytes after the last tensor
	BadMetadata       FormatErrorKind = "bad metadata"         // __metadata__ not a string->string object
)

// FormatError is a malformed safetensors file (or, from the writer, a tensor
// list that would make one). It unwraps to errdefs.ErrDataLoss: the bytes
// are not a valid safetensors file (exit 4).
type FormatError struct {
	Kind   FormatErrorKind
	Tensor string // the tensor concerned, if any
	Detail string
}

func (e *FormatError) Error() string {
	s := "safetensors: " + string(e.Kind)
	if e.Tensor != "" {
		s += ": tensor " + strconv.Quote(e.Tensor)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap classifies format errors as invalid data.
func (e *FormatError) Unwrap() error { return errdefs.ErrDataLoss }

func stErr(kind FormatErrorKind, tensor, format string, args ...any) error {
	return &FormatError{Kind: kind, Tensor: tensor, Detail: fmt.Sprintf(format, args...)}
}

const stMetadataKey = "__metadata__"

// ReadHeader reads and validates the safetensors header of a file of the given
// size; it reads only the header, never more than 8+MaxHeaderLen bytes, and
// checks the length prefix against size before allocating. It accepts only
// files the reference implementation accepts, and is stricter in places:
// duplicate keys, unknown entry fields, a null __metadata__, lone UTF-16
// surrogate escapes and a header not starting with '{' (leading whitespace)
// are rejected. Malformed files yield a *FormatError; I/O errors from r are
// wrapped, not FormatErrors.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < 8 {
		return nil, stErr(HeaderTooShort, "", "file is %d bytes, the length prefix alone is 8", size)
	}
	var prefix [8]byte
	if err := stReadFull(r, prefix[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderLen {
		return nil, stErr(HeaderTooLarge, "", "header length %d exceeds %d", n, MaxHeaderLen)
	}
	if int64(n) > size-8 {
		return nil, stErr(HeaderPastEOF, "", "header length %d runs past the end of a %d-byte file", n, size)
	}
	hdr := make([]byte, n)
	if err := stReadFull(r, hdr, 8); err != nil {
		return nil, fmt.Errorf("safetensors: reading header: %w", err)
	}
	return stParseHeader(hdr, size-8-int64(n))
}

func stReadFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// stParseHeader validates the JSON header hdr followed by a data buffer of dataLen bytes.
func stParseHeader(hdr []byte, dataLen int64) (*Header, error) {
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, stErr(HeaderNotJSON, "", "header does not begin with '{'")
	}
	if !utf8.Valid(hdr) {
		return nil, stErr(HeaderNotJSON, "", "header is not valid UTF-8")
	}
	// encoding/json's scanner is the authority on syntax; the walk below
	// relies on it. Decoder.Token would do both, but costs several
	// allocations per scalar.
	if err := stValidJSON(hdr); err != nil {
		return nil, err
	}
	p := &stParser{b: hdr}
	h := &Header{HeaderLen: int64(len(hdr))}
	if err := p.delim('{', HeaderNotJSON, ""); err != nil {
		return nil, err
	}
	// Size for the likely number of tensors; a guess, not a limit.
	guess := bytes.Count(hdr, []byte(`"data_offsets"`))
	seen := make(map[string]struct{}, guess+1)
	if guess > 0 {
		h.Tensors = make([]TensorInfo, 0, guess)
	}
	for p.more() {
		kb, err := p.key()
		if err != nil {
			return nil, err
		}
		name := string(kb)
		if _, dup := seen[name]; dup {
			return nil, stErr(DuplicateKey, name, "top-level key repeated")
		}
		seen[name] = struct{}{}
		if name == stMetadataKey {
			if h.Metadata, err = p.metadata(); err != nil {
				return nil, err
			}
			continue
		}
		if name == "" {
			return nil, stErr(BadEntry, "", "empty tensor name")
		}
		t, err := p.entry(name)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	if err := p.delim('}', HeaderNotJSON, ""); err != nil {
		return nil, err
	}
	if p.skip(); p.i != len(hdr) {
		return nil, stErr(HeaderNotJSON, "", "data after the header object at byte %d", p.i)
	}
	if len(h.Tensors) == 0 {
		h.Tensors = nil
	}
	stSortTensors(h.Tensors)
	end, err := stCheckLayout(h.Tensors, dataLen)
	if err != nil {
		return nil, err
	}
	if end != dataLen {
		return nil, stErr(TrailingBytes, "", "tensors end at data offset %d but the data buffer is %d bytes", end, dataLen)
	}
	return h, nil
}
