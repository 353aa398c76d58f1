package artifact

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
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
// list that would make one). It unwraps to errdefs.ErrInvalidArgument.
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

// Unwrap classifies format errors as invalid arguments.
func (e *FormatError) Unwrap() error { return errdefs.ErrInvalidArgument }

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
	// relies on it. (Decoder.Token would do both, but costs several
	// allocations per scalar: ~100 ms for 10,000 tensors.)
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

// stValidJSON checks that hdr is one JSON value (with surrounding JSON
// whitespace) whose strings hold no lone UTF-16 surrogate escapes:
// encoding/json turns those into U+FFFD, the reference rejects them.
func stValidJSON(hdr []byte) error {
	if !json.Valid(hdr) {
		var v struct{}
		err := json.Unmarshal(hdr, &v) // for the message only
		return stErr(HeaderNotJSON, "", "%v", err)
	}
	for i := 0; i+1 < len(hdr); i++ {
		if hdr[i] != '\\' {
			k := bytes.IndexByte(hdr[i:], '\\')
			if k < 0 {
				break
			}
			i += k
		}
		if i+1 >= len(hdr) {
			break
		}
		if hdr[i+1] != 'u' { // a one-character escape such as \" or \\
			i++
			continue
		}
		// json.Valid guarantees four hex digits follow.
		r := stHex4(hdr[i+2:])
		i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return stErr(HeaderNotJSON, "", "lone UTF-16 surrogate escape at byte %d", i-5)
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(hdr) || hdr[i+1] != '\\' || hdr[i+2] != 'u' {
				return stErr(HeaderNotJSON, "", "lone UTF-16 surrogate escape at byte %d", i-5)
			}
			if lo := stHex4(hdr[i+3:]); lo < 0xDC00 || lo > 0xDFFF {
				return stErr(HeaderNotJSON, "", "lone UTF-16 surrogate escape at byte %d", i-5)
			}
			i += 6
		}
	}
	return nil
}

func stHex4(b []byte) rune {
	v, _ := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(v)
}

// stParser walks a header that stValidJSON accepted, one token at a time,
// so that it sees (and rejects) repeated keys, which json.Unmarshal silently
// merges. Commas and colons are skipped like whitespace: the syntax is
// already known to be valid.
type stParser struct {
	b     []byte
	i     int
	arena []int64 // backing store for shapes and offsets
}

// stToken is one JSON token: kind is a delimiter ({ } [ ]), '"' for a
// string, '0' for a number or 'l' for true, false or null; b is the decoded
// string or the number or literal text (often aliasing the header).
type stToken struct {
	kind byte
	b    []byte
}

func (p *stParser) skip() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\r', '\n', ',', ':':
			p.i++
		default:
			return
		}
	}
}

// more reports whether the current object or array has another element.
func (p *stParser) more() bool {
	p.skip()
	return p.i < len(p.b) && p.b[p.i] != '}' && p.b[p.i] != ']'
}

func (p *stParser) token() (stToken, error) {
	p.skip()
	if p.i >= len(p.b) {
		return stToken{}, stErr(HeaderNotJSON, "", "unexpected end of header")
	}
	start := p.i
	switch c := p.b[p.i]; c {
	case '{', '}', '[', ']':
		p.i++
		return stToken{kind: c}, nil
	case '"':
		end := start + 1 // the closing quote: the first one after an even run of backslashes
		for {
			k := bytes.IndexByte(p.b[end:], '"')
			if k < 0 {
				end = len(p.b)
				break
			}
			end += k
			odd := false
			for m := end - 1; m > start && p.b[m] == '\\'; m-- {
				odd = !odd
			}
			if !odd {
				break
			}
			end++
		}
		p.i = min(end+1, len(p.b))
		if raw := p.b[start+1 : end]; bytes.IndexByte(raw, '\\') < 0 {
			return stToken{kind: '"', b: raw}, nil
		}
		var s string
		if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
			return stToken{}, stErr(HeaderNotJSON, "", "string at byte %d: %v", start, err)
		}
		return stToken{kind: '"', b: []byte(s)}, nil
	}
	for p.i < len(p.b) && !strings.ContainsRune(" \t\r\n,:{}[]\"", rune(p.b[p.i])) {
		p.i++
	}
	tok := stToken{kind: 'l', b: p.b[start:p.i]}
	if c := tok.b[0]; c == '-' || (c >= '0' && c <= '9') {
		tok.kind = '0'
	}
	return tok, nil
}

// delim reads the next token and fails with kind unless it is d.
func (p *stParser) delim(d byte, kind FormatErrorKind, tensor string) error {
	tok, err := p.token()
	if err != nil {
		return err
	}
	if tok.kind != d {
		return stErr(kind, tensor, "expected '%c', got %s", d, tok.describe())
	}
	return nil
}

// key reads an object key (the syntax check guarantees keys are strings).
func (p *stParser) key() ([]byte, error) {
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	if tok.kind != '"' {
		return nil, stErr(HeaderNotJSON, "", "expected an object key, got %s", tok.describe())
	}
	return tok.b, nil
}

func (t stToken) describe() string {
	switch t.kind {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 'l':
		return string(t.b)
	}
	return fmt.Sprintf("'%c'", t.kind)
}

func (p *stParser) metadata() (map[string]string, error) {
	if err := p.delim('{', BadMetadata, ""); err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for p.more() {
		kb, err := p.key()
		if err != nil {
			return nil, err
		}
		k := string(kb)
		if _, dup := m[k]; dup {
			return nil, stErr(DuplicateKey, "", "__metadata__ key %q repeated", k)
		}
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		if tok.kind != '"' {
			return nil, stErr(BadMetadata, "", "__metadata__ value of %q is %s, not a string", k, tok.describe())
		}
		m[k] = string(tok.b)
	}
	if err := p.delim('}', HeaderNotJSON, ""); err != nil {
		return nil, err
	}
	return m, nil
}

var stEntryFields = [3]string{"dtype", "shape", "data_offsets"}

func (p *stParser) entry(name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if err := p.delim('{', BadEntry, name); err != nil {
		return t, err
	}
	var have [3]bool
	for p.more() {
		k, err := p.key()
		if err != nil {
			return t, err
		}
		var f int
		switch string(k) {
		case "dtype":
			f = 0
		case "shape":
			f = 1
		case "data_offsets":
			f = 2
		default:
			return t, stErr(BadEntry, name, "unknown field %q", k)
		}
		if have[f] {
			return t, stErr(DuplicateKey, name, "field %q repeated", k)
		}
		have[f] = true
		switch f {
		case 0:
			tok, err := p.token()
			if err != nil {
				return t, err
			}
			if tok.kind != '"' {
				return t, stErr(BadEntry, name, "dtype is %s, not a string", tok.describe())
			}
			if dt, ok := stDTypes[string(tok.b)]; ok {
				t.DType = dt.Name // interned
			} else {
				return t, stErr(UnknownDType, name, "unknown dtype %q", tok.b)
			}
		case 1:
			t.Shape, err = p.ints(name, "shape")
		case 2:
			var offs []int64
			if offs, err = p.ints(name, "data_offsets"); err == nil && len(offs) != 2 {
				err = stErr(BadEntry, name, "data_offsets has %d elements, want 2", len(offs))
			} else if err == nil {
				t.Begin, t.End = offs[0], offs[1]
			}
		}
		if err != nil {
			return t, err
		}
	}
	if err := p.delim('}', HeaderNotJSON, ""); err != nil {
		return t, err
	}
	for f, ok := range have {
		if !ok {
			return t, stErr(BadEntry, name, "missing field %q", stEntryFields[f])
		}
	}
	return t, nil
}

// ints reads an array of non-negative integers that fit in int64.
func (p *stParser) ints(name, field string) ([]int64, error) {
	if err := p.delim('[', BadEntry, name); err != nil {
		return nil, err
	}
	if cap(p.arena)-len(p.arena) < 8 {
		p.arena = make([]int64, 0, 1024)
	}
	start := len(p.arena)
	for p.more() {
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		if tok.kind != '0' {
			return nil, stErr(BadEntry, name, "%s[%d] is %s, not an integer", field, len(p.arena)-start, tok.describe())
		}
		v, why := stParseUint(tok.b)
		if why != "" {
			return nil, stErr(BadEntry, name, "%s[%d] = %s %s", field, len(p.arena)-start, tok.b, why)
		}
		p.arena = append(p.arena, v)
	}
	out := p.arena[start:len(p.arena):len(p.arena)]
	if err := p.delim(']', HeaderNotJSON, ""); err != nil {
		return nil, err
	}
	return out, nil
}

// stParseUint parses a JSON number that must be an integer in [0, 2^63).
func stParseUint(b []byte) (int64, string) {
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			if b[0] == '-' && bytes.IndexAny(b, ".eE") < 0 {
				return 0, "is negative"
			}
			return 0, "is not an integer"
		}
		d := uint64(c - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, "does not fit in 63 bits"
		}
		v = v*10 + d
	}
	return int64(v), ""
}
