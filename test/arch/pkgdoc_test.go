package arch

import (
	"fmt"
	"go/ast"
	"go/doc"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// leadPhrase is what a part of a row's owns cell leads with: its text
// before the first colon, comma, semicolon or parenthesis, lower case,
// without backticks.
func leadPhrase(owns string) string {
	lead, _, _ := strings.Cut(owns, "(")
	if i := strings.IndexAny(lead, ":,;"); i >= 0 {
		lead = lead[:i]
	}
	return normalize(lead)
}

func normalize(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(strings.ReplaceAll(s, "`", "")), " "))
}

// ownsOf pairs each package a row names with its part of the owns cell:
// the whole cell for one package, for several the cell's parts between
// semicolons, in order. A row of "x/..." packages owns trees, which the
// table names part by part; it is not checked.
func ownsOf(r rule) (map[string]string, error) {
	if slices.ContainsFunc(r.packages, func(p string) bool { return strings.HasSuffix(p, "/...") }) {
		return nil, nil
	}
	parts := []string{r.owns}
	if len(r.packages) > 1 {
		parts = strings.Split(r.owns, ";")
	}
	if len(parts) != len(r.packages) {
		return nil, fmt.Errorf("the row at line %d names %d packages and owns %d things (parts between semicolons)", r.line, len(r.packages), len(parts))
	}
	out := map[string]string{}
	for i, p := range r.packages {
		out[p] = leadPhrase(parts[i])
	}
	return out, nil
}

// synopsis is the first sentence of a package's doc comment, normalized.
func synopsis(files []*ast.File) string {
	for _, f := range files {
		if f.Doc != nil {
			return normalize(new(doc.Package).Synopsis(f.Doc.Text()))
		}
	}
	return ""
}

// docBreaks are the packages whose doc comment's first sentence does not
// name what their row leads with; docs maps a package to that sentence.
func docBreaks(rules []rule, docs map[string]string) []string {
	var out []string
	for _, r := range rules {
		owns, err := ownsOf(r)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		for _, p := range slices.Sorted(maps.Keys(owns)) {
			if lead := owns[p]; !strings.Contains(docs[p], lead) {
				out = append(out, fmt.Sprintf("%s: its doc comment's first sentence does not say %q (line %d of the table); it says %q", p, lead, r.line, docs[p]))
			}
		}
	}
	return out
}

// TestPackageDocs: each package a row names on its own (not "x/...")
// says, in its doc comment's first sentence, what its row leads with.
func TestPackageDocs(t *testing.T) {
	root := moduleRoot(t)
	rules := loadRules(t, root)
	docs := map[string]string{}
	for _, r := range rules {
		for _, p := range r.packages {
			if !strings.HasSuffix(p, "/...") {
				_, files := parseFiles(t, filepath.Join(root, filepath.FromSlash(p)))
				docs[p] = synopsis(files)
			}
		}
	}
	if bad := docBreaks(rules, docs); len(bad) > 0 {
		t.Errorf("package doc comments do not say what docs/architecture.md's package table says they own:\n\t%s", strings.Join(bad, "\n\t"))
	}
}

func TestPackageDocsCatch(t *testing.T) {
	rules := []rule{
		{line: 1, packages: []string{"peer"}, owns: "the weight peer: server, sessions (`Serve`)"},
		{line: 2, packages: []string{"artifact/blake3", "artifact/cast"}, owns: "`BLAKE3` with pieces; F32, F16, BF16 conversion"},
		{line: 3, packages: []string{"internal/..."}, owns: "`procs` (which processes use a file)"},
	}
	good := map[string]string{
		"peer":            "package peer is the weight peer: a node serves its store.",
		"artifact/blake3": "package blake3 is blake3 with pieces.",
		"artifact/cast":   "package cast converts between f32, f16 and bf16.",
	}
	for _, tc := range []struct {
		name  string
		rules []rule
		docs  map[string]string
		want  []string
	}{
		{"all say it", rules, good, nil},
		{"a doc without its row's word", rules, map[string]string{"peer": "package peer moves bytes between nodes.", "artifact/blake3": good["artifact/blake3"], "artifact/cast": good["artifact/cast"]},
			[]string{`peer: its doc comment's first sentence does not say "the weight peer"`}},
		{"no doc", rules, map[string]string{"peer": good["peer"], "artifact/cast": good["artifact/cast"]},
			[]string{`artifact/blake3: its doc comment's first sentence does not say "blake3 with pieces"`}},
		{"parts and packages differ", []rule{{line: 4, packages: []string{"a", "b"}, owns: "one thing, another"}}, nil,
			[]string{"names 2 packages and owns 1 things"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := docBreaks(tc.rules, tc.docs)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %d: %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}
