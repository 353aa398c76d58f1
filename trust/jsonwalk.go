package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
)

// walker reads a JSON document token by token so that every error names
// the line and column it is about: encoding/json's own errors for unknown
// fields carry no position.
type walker struct {
	name string
	src  []byte
	dec  *json.Decoder
}

func newWalker(name string, src []byte) *walker {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	return &walker{name: name, src: src, dec: dec}
}

// position is the 1-based line and column of byte offset off in src.
func position(src []byte, off int64) (line, col int) {
	if off < 0 {
		off = 0
	}
	if off > int64(len(src)) {
		off = int64(len(src))
	}
	before := src[:off]
	line = 1 + bytes.Count(before, []byte{'\n'})
	col = 1 + len(before) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col
}

// PolicyError is a policy the parser refused: the file, and where in it.
type PolicyError struct {
	File   string
	Line   int
	Column int
	Msg    string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("policy %s: line %d, column %d: %s", e.File, e.Line, e.Column, e.Msg)
}

// Unwrap classifies a policy error as invalid input.
func (e *PolicyError) Unwrap() error { return errdefs.ErrInvalidArgument }

// errAt is an error about the token starting at byte offset off.
func (w *walker) errAt(off int64, format string, args ...any) error {
	// The decoder's offset is after the previous token; skip the blanks
	// and separators between it and the token the error is about.
	line, col := position(w.src, skipBlank(w.src, max(off, 0)))
	return &PolicyError{File: w.name, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

// decodeErr turns an error of the decoder into one with a position.
func (w *walker) decodeErr(at int64, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return w.errAt(syn.Offset-1, "%v", syn)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return w.errAt(int64(len(w.src)), "unexpected end of file")
	}
	return w.errAt(at, "%v", err)
}

// delim reads one token that must be the delimiter want.
func (w *walker) delim(want json.Delim, what string) error {
	at := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return w.decodeErr(at, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return w.errAt(at, "%s: want %q, got %s", what, string(want), describe(tok))
	}
	return nil
}

// object reads an object, calling member for each key with the offset of
// the key; member must consume the value. A key named twice is refused.
func (w *walker) object(what string, member func(key string, at int64) error) error {
	if err := w.delim('{', what); err != nil {
		return err
	}
	seen := map[string]bool{}
	for w.dec.More() {
		at := w.dec.InputOffset()
		tok, err := w.dec.Token()
		if err != nil {
			return w.decodeErr(at, err)
		}
		key, ok := tok.(string)
		if !ok {
			return w.errAt(at, "%s: want a key, got %s", what, describe(tok))
		}
		if seen[key] {
			return w.errAt(at, "%s: %q named twice", what, key)
		}
		seen[key] = true
		if err := member(key, at); err != nil {
			return err
		}
	}
	return w.delim('}', what)
}

// array reads an array, calling elem for each element (which it must consume).
func (w *walker) array(what string, elem func(i int, at int64) error) error {
	if err := w.delim('[', what); err != nil {
		return err
	}
	for i := 0; w.dec.More(); i++ {
		if err := elem(i, w.dec.InputOffset()); err != nil {
			return err
		}
	}
	return w.delim(']', what)
}

// str reads a string value.
func (w *walker) str(what string) (string, error) {
	at := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return "", w.decodeErr(at, err)
	}
	s, ok := tok.(string)
	if !ok {
		return "", w.errAt(at, "%s: want a string, got %s", what, describe(tok))
	}
	return s, nil
}

// strings reads an array of strings.
func (w *walker) strings(what string) ([]string, error) {
	var out []string
	err := w.array(what, func(int, int64) error {
		s, err := w.str(what)
		out = append(out, s)
		return err
	})
	return out, err
}

// end checks that nothing but blanks follows the document.
func (w *walker) end() error {
	at := w.dec.InputOffset()
	if _, err := w.dec.Token(); err == nil {
		return w.errAt(at, "data after the policy object")
	}
	if rest := bytes.TrimSpace(w.src[at:]); len(rest) > 0 {
		return w.errAt(at, "data after the policy object")
	}
	return nil
}

func describe(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", string(t))
	case string:
		return fmt.Sprintf("the string %q", t)
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%v", t)
	}
}
