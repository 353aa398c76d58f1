package tpsplit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseSpecErrors(t *testing.T) {
	for _, c := range []struct{ what, text string }{
		{"unknown top-level key", "name = \"x\"\nnmae = \"y\"\n"},
		{"unknown rule key", "name = \"x\"\n[[rule]]\npattern = \"*\"\nsplt = \"row\"\n"},
		{"unknown table", "name = \"x\"\n[rules]\npattern = \"*\"\n"},
		{"bad split value", "name = \"x\"\n[[rule]]\npattern = \"*\"\nsplit = \"diagonal\"\n"},
		{"missing split", "name = \"x\"\n[[rule]]\npattern = \"*\"\n"},
		{"split wrong type", "name = \"x\"\n[[rule]]\npattern = \"*\"\nsplit = 3\n"},
		{"bad regex", "name = \"x\"\n[[rule]]\npattern = \"re:([a-\"\nsplit = \"row\"\n"},
		{"bad glob", "name = \"x\"\n[[rule]]\npattern = \"a.[b-\"\nsplit = \"row\"\n"},
		{"empty pattern", "name = \"x\"\n[[rule]]\npattern = \"\"\nsplit = \"row\"\n"},
		{"bad default", "name = \"x\"\ndefault = \"column\"\n"},
		{"missing name", "default = \"error\"\n"},
		{"replicated with dim", "name = \"x\"\n[[rule]]\npattern = \"*\"\nsplit = \"replicated\"\ndim = 0\n"},
		{"replicated with padding", "name = \"x\"\n[[rule]]\npattern = \"*\"\nsplit = \"replicated\"\npad_to_multiple = 8\n"},
		{"negative padding", "name = \"x\"\n[[rule]]\npattern = \"*\"\nsplit = \"column\"\npad_to_multiple = -8\n"},
		{"not TOML", "name = \n"},
		{"duplicate key", "name = \"x\"\nname = \"y\"\n"},
	} {
		_, err := ParseSpec([]byte(c.text))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "tpsplit: ") {
			t.Errorf("%s: got %v, want a tpsplit failure wrapping ErrInvalidArgument", c.what, err)
		}
	}
}

func TestMatch(t *testing.T) {
	s := mustSpec(t, testSpec)
	for name, want := range map[string]int{
		"model.layers.3.self_attn.q_proj.weight": 0,
		"q_proj.weight":                          -1, // the glob needs a '.' before q_proj
		"model.layers.3.self_attn.o_proj.bias":   2,
		"model.layers.3.mlp.experts.w1":          3,
		"model.layers.3.mlp.experts.w3":          3,
		"model.layers.3.mlp.experts.w13":         -1, // regexps match the whole name
		"model.layers.3.mlp.experts.w2":          4,
		"model.embed_tokens.weight":              6,
		"embed_tokens.weight":                    6,
		"lm_head.weight":                         7,
		"model.lm_head.weight":                   -1,
	} {
		if got := s.Match(name); got != want {
			t.Errorf("Match(%q) = %d, want %d", name, got, want)
		}
	}
	if s.Default != DefaultReplicated || mustSpec(t, "name = \"x\"\n").Default != DefaultReplicated {
		t.Error("default not filled in")
	}
}

func TestFingerprint(t *testing.T) {
	a := mustSpec(t, `
name = "llama-tp"
[[rule]]
pattern = "*.q_proj.weight"
split = "column"
[[rule]]
pattern = "*embed_tokens.weight"
split = "column"
pad_to_multiple = 64
dim = 0
`)
	// Same meaning: comments, spacing, key order, explicit default.
	b := mustSpec(t, `
# a comment
default = "replicated"
name    = "llama-tp"

[[rule]]
split   = "column"
pattern = "*.q_proj.weight"

[[rule]]
dim = 0
pad_to_multiple = 64  # vocabulary
split = "column"
pattern = "*embed_tokens.weight"
`)
	canon := `{"default":"replicated","name":"llama-tp","rules":[` +
		`{"pattern":"*.q_proj.weight","split":"column"},` +
		`{"dim":0,"pad_to_multiple":64,"pattern":"*embed_tokens.weight","split":"column"}],` +
		`"schema":"weightsnap.tpsplit.v1"}`
	sum := sha256.Sum256([]byte(canon))
	want := "sha256:" + hex.EncodeToString(sum[:])
	if a.Fingerprint() != want || b.Fingerprint() != want {
		t.Fatalf("fingerprints %s, %s, want %s", a.Fingerprint(), b.Fingerprint(), want)
	}
	seen := map[string]string{want: "base"}
	for what, text := range map[string]string{
		"name":          "name = \"llama-tp2\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n[[rule]]\npattern = \"*embed_tokens.weight\"\nsplit = \"column\"\npad_to_multiple = 64\ndim = 0\n",
		"default":       "name = \"llama-tp\"\ndefault = \"error\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n[[rule]]\npattern = \"*embed_tokens.weight\"\nsplit = \"column\"\npad_to_multiple = 64\ndim = 0\n",
		"rule order":    "name = \"llama-tp\"\n[[rule]]\npattern = \"*embed_tokens.weight\"\nsplit = \"column\"\npad_to_multiple = 64\ndim = 0\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n",
		"split":         "name = \"llama-tp\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"row\"\n[[rule]]\npattern = \"*embed_tokens.weight\"\nsplit = \"column\"\npad_to_multiple = 64\ndim = 0\n",
		"padding":       "name = \"llama-tp\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n[[rule]]\npattern = \"*embed_tokens.weight\"\nsplit = \"column\"\npad_to_multiple = 128\ndim = 0\n",
		"dim absent":    "name = \"llama-tp\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n[[rule]]\npattern = \"*embed_tokens.weight\"\nsplit = \"column\"\npad_to_multiple = 64\n",
		"pattern":       "name = \"llama-tp\"\n[[rule]]\npattern = \"re:.*\\\\.q_proj\\\\.weight\"\nsplit = \"column\"\n[[rule]]\npattern = \"*embed_tokens.weight\"\nsplit = \"column\"\npad_to_multiple = 64\ndim = 0\n",
		"one rule less": "name = \"llama-tp\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n",
	} {
		fp := mustSpec(t, text).Fingerprint()
		if prev, ok := seen[fp]; ok {
			t.Errorf("changing %s gives the fingerprint of %s", what, prev)
		}
		seen[fp] = what
	}
}
