// Package tpsplit is the layout spec and the tensor-parallel split: each
// tensor split for a rank according to the spec.
//
// # Layout spec
//
// A layout spec is a TOML document:
//
//	name = "llama-tp"        # layout name (required)
//	default = "replicated"   # tensors matching no rule: "replicated" (the default) or "error"
//
//	[[rule]]
//	pattern = "*.q_proj.weight"  # glob (path.Match syntax) on the tensor name
//	split = "column"
//
//	[[rule]]
//	pattern = "re:.*\\.o_proj\\.weight"  # "re:" prefix: RE2 regexp that must match the whole name
//	split = "row"
//
//	[[rule]]
//	pattern = "*embed_tokens.weight"
//	split = "column"
//	pad_to_multiple = 64
//
// Unknown keys are rejected. Rules are tried in order; the first whose
// pattern matches the tensor name applies. In a glob, '*' matches any run of
// characters including '.', since tensor names contain no '/'.
//
// A rule's split is one of:
//
//   - "column": column parallel, split dimension 0 (the output features of an
//     [out, in] weight, the elements of a 1-D bias, the vocabulary of an
//     embedding). A 0-D tensor under a column rule is an error.
//   - "row": row parallel, split the last dimension (the input features).
//     Tensors with fewer than 2 dimensions under a row rule (the bias of a
//     row-parallel layer) are replicated.
//   - "replicated": every rank gets the whole tensor; dim and
//     pad_to_multiple are not allowed.
//
// dim = K overrides the split dimension of a column or row rule; a negative
// K counts from the end (-1 is the last dimension). With dim given, the
// 1-D replication of row rules does not apply, and K must be a valid
// dimension of the tensor.
//
// Every rank gets an equal shard. Without padding, a split dimension of size
// D that tpSize does not divide is an error naming the tensor. With
// pad_to_multiple = M (M >= 1), the split dimension is first padded to
// P = ceil(D / (M*tpSize)) * M*tpSize, the smallest multiple of M*tpSize that
// is at least D; rank r gets indices [r*P/tpSize, (r+1)*P/tpSize) of the
// padded dimension, so each shard's size P/tpSize is a multiple of M. The
// padding indices D..P-1 come at the end (on the last rank or ranks) and are
// filled with zero bytes. Padding applies for every tpSize, 1 included.
// pad_to_multiple = 0 (or absent) means no padding.
package tpsplit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
)

// Split kinds of a Rule.
const (
	Column     = "column"
	Row        = "row"
	Replicated = "replicated"
)

// Values of Spec.Default.
const (
	DefaultReplicated = "replicated"
	DefaultError      = "error"
)

// failure is a refused split, naming the tensor when it concerns one,
// classified errdefs.ErrInvalidArgument (bad spec, shape, rank, length, or a
// dimension that does not divide) or errdefs.ErrNotImplemented (splitting a
// sub-byte dtype).
func failure(tensor, reason string, class error) error {
	if tensor != "" {
		return fmt.Errorf("tpsplit: tensor %q: %s: %w", tensor, reason, class)
	}
	return fmt.Errorf("tpsplit: %s: %w", reason, class)
}

func invalid(tensor, format string, args ...any) error {
	return failure(tensor, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// Rule is one [[rule]] entry of a layout spec.
type Rule struct {
	Pattern       string `toml:"pattern"`
	Split         string `toml:"split"`
	Dim           *int   `toml:"dim"`
	PadToMultiple int64  `toml:"pad_to_multiple"`
}

// Spec is a parsed, validated layout spec. Build it with ParseSpec; its
// fields are for reading only.
type Spec struct {
	Name    string
	Default string // DefaultReplicated or DefaultError, never empty
	Rules   []Rule

	match []func(string) bool // compiled Rules[i].Pattern
}

type specFile struct {
	Name    string `toml:"name"`
	Default string `toml:"default"`
	Rules   []Rule `toml:"rule"`
}

// ParseSpec parses and validates a TOML layout spec. Unknown keys, wrong
// value types, unknown split kinds or defaults, malformed patterns and
// misplaced options are errors.
func ParseSpec(data []byte) (*Spec, error) {
	var f specFile
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, invalid("", "layout spec: %v", err)
	}
	if f.Name == "" {
		return nil, invalid("", "layout spec: name is required")
	}
	s := &Spec{Name: f.Name, Default: f.Default, Rules: f.Rules}
	switch s.Default {
	case "":
		s.Default = DefaultReplicated
	case DefaultReplicated, DefaultError:
	default:
		return nil, invalid("", "layout spec: default %q: want %q or %q", f.Default, DefaultReplicated, DefaultError)
	}
	for i, r := range s.Rules {
		m, err := compile(r.Pattern)
		if err != nil {
			return nil, invalid("", "layout spec: rule %d: pattern %q: %v", i, r.Pattern, err)
		}
		s.match = append(s.match, m)
		switch r.Split {
		case Column, Row:
		case Replicated:
			if r.Dim != nil || r.PadToMultiple != 0 {
				return nil, invalid("", "layout spec: rule %d (%q): dim and pad_to_multiple are not allowed with split = %q", i, r.Pattern, r.Split)
			}
		default:
			return nil, invalid("", "layout spec: rule %d (%q): split %q: want %q, %q or %q", i, r.Pattern, r.Split, Column, Row, Replicated)
		}
		if r.PadToMultiple < 0 {
			return nil, invalid("", "layout spec: rule %d (%q): pad_to_multiple %d is negative", i, r.Pattern, r.PadToMultiple)
		}
	}
	return s, nil
}

func compile(pattern string) (func(string) bool, error) {
	if pattern == "" {
		return nil, fmt.Errorf("empty pattern")
	}
	if expr, ok := strings.CutPrefix(pattern, "re:"); ok {
		re, err := regexp.Compile(`^(?:` + expr + `)$`)
		if err != nil {
			return nil, err
		}
		return re.MatchString, nil
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	return func(name string) bool {
		ok, _ := path.Match(pattern, name)
		return ok
	}, nil
}

// Match returns the index of the first rule whose pattern matches the tensor
// name, or -1 when none does.
func (s *Spec) Match(name string) int {
	for i, m := range s.match {
		if m(name) {
			return i
		}
	}
	return -1
}

// fingerprintSchema versions the canonical form hashed by Fingerprint.
const fingerprintSchema = "weightsnap.tpsplit.v1"

// Fingerprint returns "sha256:<hex>" of the spec's canonical form: JSON with
// sorted keys and no insignificant white space, holding a schema tag, the
// name, the default (filled in when absent) and the rules in order (dim and
// pad_to_multiple omitted when absent or zero). Formatting, comments and key
// order in the TOML do not change it; any change of meaning does.
func (s *Spec) Fingerprint() string {
	type canonRule struct { // fields in sorted key order
		Dim           *int   `json:"dim,omitempty"`
		PadToMultiple int64  `json:"pad_to_multiple,omitempty"`
		Pattern       string `json:"pattern"`
		Split         string `json:"split"`
	}
	type canonSpec struct {
		Default string      `json:"default"`
		Name    string      `json:"name"`
		Rules   []canonRule `json:"rules"`
		Schema  string      `json:"schema"`
	}
	c := canonSpec{Default: s.Default, Name: s.Name, Rules: []canonRule{}, Schema: fingerprintSchema}
	for _, r := range s.Rules {
		c.Rules = append(c.Rules, canonRule{Dim: r.Dim, PadToMultiple: r.PadToMultiple, Pattern: r.Pattern, Split: r.Split})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		panic(err) // cannot happen: strings and integers only
	}
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}
