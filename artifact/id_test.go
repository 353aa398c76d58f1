package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

const testHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		in  string
		hex bool // parse with ParseIDHex
		ok  bool
	}{
		{in: "sha256:" + testHex, ok: true},
		{in: testHex, hex: true, ok: true},
		{in: testHex},
		{in: "sha256:" + testHex, hex: true},
		{in: "sha256:" + strings.ToUpper(testHex)},
		{in: "sha256:" + testHex[:63]},
		{in: "sha256:" + testHex + "0"},
		{in: "sha512:" + testHex},
		{in: "blake3:" + testHex},
		{in: ""},
		{in: "sha256:"},
	} {
		parse := ParseID
		if tc.hex {
			parse = ParseIDHex
		}
		id, err := parse(tc.in)
		if !tc.ok {
			if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("parse(%q) = %v, %v; want an invalid-argument error", tc.in, id, err)
			}
			if !id.IsZero() {
				t.Errorf("parse(%q) returned %v with its error", tc.in, id)
			}
			continue
		}
		if err != nil {
			t.Fatalf("parse(%q): %v", tc.in, err)
		}
		if id.String() != "sha256:"+testHex || id.Hex() != testHex || id.Short() != testHex[:12] || id.Digest().String() != id.String() {
			t.Errorf("parse(%q) = %q hex %q short %q", tc.in, id, id.Hex(), id.Short())
		}
	}
}

func TestIDJSON(t *testing.T) {
	type doc struct {
		ID    ID `json:"id"`
		Other ID `json:"other,omitzero"`
	}
	raw, err := json.Marshal(doc{ID: MustParseID("sha256:" + testHex)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"sha256:` + testHex + `"}`; string(raw) != want {
		t.Fatalf("marshal = %s, want %s", raw, want)
	}
	var back doc
	if err := json.Unmarshal(raw, &back); err != nil || back.ID.Hex() != testHex || !back.Other.IsZero() {
		t.Fatalf("unmarshal = %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"id":"sha256:`+testHex[:10]+`"}`), &back); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unmarshal of a short id = %v, want an invalid-argument error", err)
	}
}

func TestIdentityID(t *testing.T) {
	id := Identity{Schema: IdentitySchema, Model: Model{Revision: strings.Repeat("a", 40)}}
	got, err := id.ID()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := id.CanonicalJSON()
	sum := sha256.Sum256(c)
	if d := "sha256:" + hex.EncodeToString(sum[:]); got.String() != d || !IsSHA256Hex(got.Hex()) {
		t.Fatalf("ID() = %q, the sha256 of the canonical JSON is %q", got, d)
	}
}

func FuzzParseID(f *testing.F) {
	f.Add("sha256:" + testHex)
	f.Add(testHex)
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("ParseID(%q).String() = %q", s, id)
		}
		back, err := ParseIDHex(id.Hex())
		if err != nil || back != id {
			t.Fatalf("ParseIDHex(%q) = %v, %v", id.Hex(), back, err)
		}
	})
}
