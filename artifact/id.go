package artifact

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// sha256HexRE is the one pattern of a sha256 in lower-case hex: an
// identity's digest, a source file's Hugging Face LFS oid, a blob name.
var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// IsSHA256Hex reports whether s is a sha256 written as 64 lower-case hex.
func IsSHA256Hex(s string) bool { return sha256HexRE.MatchString(s) }

// idPrefix starts the text form of every ID.
const idPrefix = "sha256:"

// ID is an artifact's identity digest: the sha256 of the identity's
// canonical JSON. Its text form is "sha256:<64 lower-case hex>" (labels,
// the wire, JSON documents, the CLI); its hex alone names the artifact's
// directory in a store. An ID is parsed once where bytes enter, by ParseID
// or ParseIDHex, or computed by Identity.ID; the zero ID names nothing.
type ID struct{ hex string }

// ParseID reads the text form "sha256:<64 lower-case hex>".
func ParseID(s string) (ID, error) {
	if h, ok := strings.CutPrefix(s, idPrefix); ok && IsSHA256Hex(h) {
		return ID{hex: h}, nil
	}
	return ID{}, fmt.Errorf("identity %q is not sha256:<64 lower-case hex>: %w", cut(s), errdefs.ErrInvalidArgument)
}

// ParseIDHex reads the hex alone, as a store directory names an artifact.
func ParseIDHex(h string) (ID, error) {
	if IsSHA256Hex(h) {
		return ID{hex: h}, nil
	}
	return ID{}, fmt.Errorf("identity %q is not 64 lower-case hex: %w", cut(h), errdefs.ErrInvalidArgument)
}

// MustParseID is ParseID for constants in tests and examples: it panics on
// a malformed ID.
func MustParseID(s string) ID {
	id, err := ParseID(s)
	if err != nil {
		panic(err)
	}
	return id
}

// String is the text form, "sha256:<hex>", or "" for the zero ID.
func (id ID) String() string {
	if id.hex == "" {
		return ""
	}
	return idPrefix + id.hex
}

// Hex is the 64 hex digits: the artifact's directory name in a store.
func (id ID) Hex() string { return id.hex }

// Short is the first 12 hex digits, as `weightsnap ls` shows an artifact.
func (id ID) Short() string { return ShortHex(id.hex) }

// ShortHex is the first 12 characters of a digest's hex, a revision or a
// generation, as the commands show them.
func ShortHex(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// IsZero reports whether id names nothing; JSON fields tagged omitzero
// leave it out.
func (id ID) IsZero() bool { return id.hex == "" }

// Digest is id as an OCI digest.
func (id ID) Digest() digest.Digest { return digest.Digest(id.String()) }

// MarshalText writes the text form.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the text form with ParseID; empty text is the zero ID.
func (id *ID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*id = ID{}
		return nil
	}
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// cut shortens untrusted text for an error message.
func cut(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
