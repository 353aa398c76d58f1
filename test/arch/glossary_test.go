package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// word is a row of the glossary: the word, its Go name (`pkg.Name` or
// `pkg.Type.Method`, the code span its meaning starts with) and the
// identifiers it never goes by (the code spans of its "and never" cell).
type word struct {
	word  string
	pkg   string // module-relative; "" when the row names no Go name
	name  string // Name or Type.Method
	never []string
}

var goNameRE = regexp.MustCompile("^`([a-z][a-z0-9]*(?:/[a-z][a-z0-9]*)*)\\.([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)`")

// parseGlossary reads the table of the glossary's section: its rows are
// | word | means | and never |.
func parseGlossary(doc []byte) ([]word, error) {
	text, err := section(doc, glossaryHeading)
	if err != nil {
		return nil, err
	}
	var words []word
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			return nil, fmt.Errorf("a glossary row of %d cells, want 3 (word, means, and never): %q", len(cells), line)
		}
		w := word{word: strings.Trim(strings.TrimSpace(cells[0]), "*"), never: codes(cells[2])}
		if w.word == "word" || strings.HasPrefix(w.word, "---") {
			continue
		}
		if m := goNameRE.FindStringSubmatch(strings.TrimSpace(cells[1])); m != nil {
			w.pkg, w.name = m[1], m[2]
		}
		words = append(words, w)
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("no glossary table after %q", glossaryHeading)
	}
	return words, nil
}

// declared are the names a package's files declare at the top level, a
// method as Type.Method, each with whether it is exported.
func declared(files []*ast.File) map[string]bool {
	out := map[string]bool{}
	add := func(name string, exported bool) { out[name] = exported }
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					add(d.Name.Name, d.Name.IsExported())
					continue
				}
				if recv := recvType(d.Recv.List[0].Type); recv != nil {
					add(recv.Name+"."+d.Name.Name, recv.IsExported() && d.Name.IsExported())
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(s.Name.Name, s.Name.IsExported())
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n.Name, n.IsExported())
						}
					}
				}
			}
		}
	}
	return out
}

// recvType is the type a method's receiver expression names.
func recvType(e ast.Expr) *ast.Ident {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e
	}
	return nil
}

// camelWords splits an identifier into its words: OMSBundleFile is OMS,
// Bundle, File.
func camelWords(s string) []string {
	var words []string
	rs := []rune(s)
	start := 0
	for i := 1; i < len(rs); i++ {
		lowerToUpper := unicode.IsUpper(rs[i]) && !unicode.IsUpper(rs[i-1])
		acronymEnd := unicode.IsUpper(rs[i]) && unicode.IsUpper(rs[i-1]) && i+1 < len(rs) && unicode.IsLower(rs[i+1])
		if lowerToUpper || acronymEnd || rs[i] == '_' {
			words = append(words, string(rs[start:i]))
			start = i
		}
	}
	return append(words, string(rs[start:]))
}

// namedLike says whether the identifier has the words of never in a row,
// in any case.
func namedLike(identifier, never string) bool {
	fold := func(ws []string) []string {
		for i := range ws {
			ws[i] = strings.ToLower(strings.Trim(ws[i], "_"))
		}
		return ws
	}
	nw := fold(camelWords(never))
	for _, part := range strings.Split(identifier, ".") {
		iw := fold(camelWords(part))
		for i := 0; i+len(nw) <= len(iw); i++ {
			if slices.Equal(iw[i:i+len(nw)], nw) {
				return true
			}
		}
	}
	return false
}

// glossaryBreaks are what a package's names do against the glossary: a
// Go name its word's row gives that the package does not declare, and an
// exported identifier named like one the word never goes by.
func glossaryBreaks(words []word, pkg string, names map[string]bool) []string {
	var out []string
	for _, w := range words {
		if w.pkg != pkg {
			continue
		}
		if _, ok := names[w.name]; !ok {
			out = append(out, fmt.Sprintf("%s: the glossary's %q is %s.%s, which %s does not declare", pkg, w.word, w.pkg, w.name, pkg))
		}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			for _, never := range w.never {
				if names[n] && namedLike(n, never) {
					out = append(out, fmt.Sprintf("%s exports %s: the glossary's %q is never %s", pkg, n, w.word, never))
				}
			}
		}
	}
	return out
}

// TestGlossaryNames: each glossary word with a Go name names what its
// package declares, and that package exports nothing named like what the
// word never goes by.
func TestGlossaryNames(t *testing.T) {
	root := moduleRoot(t)
	words, err := parseGlossary(readDoc(t, root))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	pkgs := map[string]bool{}
	for _, w := range words {
		if w.pkg != "" {
			pkgs[w.pkg] = true
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("no glossary word has a Go name")
	}
	var bad []string
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		_, files := parseFiles(t, filepath.Join(root, filepath.FromSlash(p)))
		bad = append(bad, glossaryBreaks(words, p, declared(files))...)
	}
	if len(bad) > 0 {
		t.Errorf("the module breaks the glossary of docs/architecture.md:\n\t%s", strings.Join(bad, "\n\t"))
	}
}

func TestGlossaryCatches(t *testing.T) {
	page := "# x\n\n" + glossaryHeading + "\n\n| word | means | and never |\n|---|---|---|\n" +
		"| **record** | `trust.Record`: a trust record | `Sigs`, `Attestation`, `SignatureFile` |\n" +
		"| **pin** | `store.Domain.Pin`: keeps an artifact | `PinnedRef` |\n" +
		"| **digest** | an OCI digest | an ID |\n\n## next\n| a | b | c |\n"
	words, err := parseGlossary([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(words) != 3 || words[0].pkg != "trust" || words[0].name != "Record" || words[1].name != "Domain.Pin" || words[2].pkg != "" ||
		!slices.Equal(words[0].never, []string{"Sigs", "Attestation", "SignatureFile"}) {
		t.Fatalf("%+v", words)
	}
	src := `package trust
type Record struct{}
type Carrier interface{}
func (r *Record) CarriedSigs() {}
func NewAttestation() {}
const OMSSignatureFile = "model.sig"
func signatureFile() {}
type sigsByRef struct{}
func (sigsByRef) Sigs() {}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pkg  string
		want []string
	}{
		{"never names exported", "trust", []string{"NewAttestation", "OMSSignatureFile", "Record.CarriedSigs"}},
		{"a Go name not declared", "store", []string{"does not declare"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := glossaryBreaks(words, tc.pkg, declared([]*ast.File{f}))
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
	if _, err := parseGlossary([]byte(glossaryHeading + "\n| a | b |\n")); err == nil {
		t.Error("a glossary row of two cells was read")
	}
}
