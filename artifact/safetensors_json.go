package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The safetensors header walker: a strict, allocation-light JSON reader
// that sees duplicate keys, which encoding/json silently merges.

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
			if b[0] == '-' && !bytes.ContainsAny(b, ".eE") {
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
