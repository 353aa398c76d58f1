package arch

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The prose of docs/architecture.md held to the code: the store's layout
// block names every path the store writes, a glossary word's owning
// package exports none of the names the word never goes by, and each
// package's doc comment names what its row of the package table owns.

const (
	storeHeading    = "## The store"
	glossaryHeading = "## Glossary"
)

// parseFiles parses the non-test Go files of dir with their comments.
func parseFiles(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("%s: no Go files", dir)
	}
	return fset, files
}

func readDoc(t *testing.T, root string) []byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// section is the text of doc from the line heading to the next
// second-level heading.
func section(doc []byte, heading string) (string, error) {
	var out []string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == heading:
			in = true
			continue
		case in && strings.HasPrefix(line, "## "):
			return strings.Join(out, "\n"), nil
		case in:
			out = append(out, line)
		}
	}
	if !in {
		return "", fmt.Errorf("no section %q", heading)
	}
	return strings.Join(out, "\n"), sc.Err()
}

// A layout block's line is a path, two spaces or more, and what the path
// is; a line indented this far or more goes on with the line before it.
const continuationIndent = 20

var descriptionGap = regexp.MustCompile(`\s{2,}`)

// layoutElements are the path elements of the first fenced block of the
// store's section: the names of the paths it lists, split at "/", "," and
// spaces.
func layoutElements(doc []byte) (map[string]bool, error) {
	text, err := section(doc, storeHeading)
	if err != nil {
		return nil, err
	}
	_, block, ok := strings.Cut(text, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		return nil, fmt.Errorf("no layout block (a fenced block) under %q", storeHeading)
	}
	elems := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if len(line)-len(trimmed) >= continuationIndent {
			continue
		}
		path := descriptionGap.Split(trimmed, 2)[0]
		for _, e := range strings.FieldsFunc(path, func(r rune) bool { return r == '/' || r == ',' || r == ' ' }) {
			elems[e] = true
		}
	}
	return elems, nil
}

// layoutName is a name the store gives a path under its root.
type layoutName struct {
	at    string // where the store's source says it
	value string
}

var (
	layoutConstRE = regexp.MustCompile(`^(dir|file|lock)[A-Z]`)
	lockLiteralRE = regexp.MustCompile(`^[a-z][a-z0-9-]*\.lock$`)
)

// layoutNames are the names the store's files give paths: every
// package-level string constant named dir*, file* or lock*
// (store/layout.go), and every lock file's name written as a literal.
func layoutNames(fset *token.FileSet, files []*ast.File) []layoutName {
	var out []layoutName
	add := func(n ast.Node, lit *ast.BasicLit) {
		if v, err := strconv.Unquote(lit.Value); err == nil {
			out = append(out, layoutName{at: fset.Position(n.Pos()).String(), value: v})
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if lit, ok := valueAt(vs, i).(*ast.BasicLit); ok && lit.Kind == token.STRING && layoutConstRE.MatchString(name.Name) {
						add(name, lit)
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && lockLiteralRE.MatchString(v) {
					add(lit, lit)
				}
			}
			return true
		})
	}
	return out
}

func valueAt(vs *ast.ValueSpec, i int) ast.Expr {
	if i < len(vs.Values) {
		return vs.Values[i]
	}
	return nil
}

// missingFromLayout are the names that no path of the layout block has as
// an element.
func missingFromLayout(names []layoutName, elems map[string]bool) []string {
	var out []string
	for _, n := range names {
		if !elems[n.value] {
			out = append(out, fmt.Sprintf("%s: %q is not in the layout block", n.at, n.value))
		}
	}
	return out
}

// TestLayoutNamesTheStoresPaths: every directory, file and lock the store
// names under its root is in the layout block of the store's section.
func TestLayoutNamesTheStoresPaths(t *testing.T) {
	root := moduleRoot(t)
	elems, err := layoutElements(readDoc(t, root))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	names := layoutNames(parseFiles(t, filepath.Join(root, "store")))
	if len(names) == 0 {
		t.Fatal("the store names no path: the layout constants moved (store/layout.go)")
	}
	if m := missingFromLayout(names, elems); len(m) > 0 {
		t.Errorf("the layout block of docs/architecture.md misses what the store writes:\n\t%s", strings.Join(m, "\n\t"))
	}
}

func TestLayoutCatches(t *testing.T) {
	src := `package store
const (
	dirPins = "pins"
	dirViews = "views"
	fileReady = "READY.json"
	EvictionLRU = "lru"
)
func f() { lockFile(d.path(dirLocks, "quota.lock")); g(".lock", "*.lock") }`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "layout.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := layoutNames(fset, []*ast.File{f})
	var values []string
	for _, n := range names {
		values = append(values, n.value)
	}
	if want := []string{"pins", "views", "READY.json", "quota.lock"}; !slices.Equal(values, want) {
		t.Fatalf("layout names %q, want %q", values, want)
	}
	page := func(block string) []byte {
		return []byte("# x\n\n" + storeHeading + "\n\ntext\n\n```\n<root>/\n" + block + "```\n\n## next\n\n```\nviews/\n```\n")
	}
	for _, tc := range []struct {
		name, block string
		missing     []string
	}{
		{"all there", "  pins/<hex>.json    a pin\n  views/<hex>/   a view\n  artifacts/<hex>/READY.json   sealed\n  locks/quota.lock   held\n", nil},
		{"a directory missing", "  pins/<hex>.json    a pin\n  artifacts/<hex>/READY.json   sealed\n  locks/quota.lock   held\n", []string{`"views"`}},
		{"named only in a description", "  pins/<hex>.json    a pin beside views/ and READY.json\n  locks/quota.lock   held\n",
			[]string{`"views"`, `"READY.json"`}},
		{"named only in a continuation", "  pins/<hex>.json    a pin\n                               views/<hex>/ READY.json\n  locks/x   quota.lock\n",
			[]string{`"views"`, `"READY.json"`, `"quota.lock"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			elems, err := layoutElements(page(tc.block))
			if err != nil {
				t.Fatal(err)
			}
			got := missingFromLayout(names, elems)
			if len(got) != len(tc.missing) {
				t.Fatalf("got %q, want %d like %q", got, len(tc.missing), tc.missing)
			}
			for i, w := range tc.missing {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %d: %q, want it to name %s", i, got[i], w)
				}
			}
		})
	}
	if _, err := layoutElements([]byte(storeHeading + "\nno block\n")); err == nil {
		t.Error("a store section without a layout block was read")
	}
}

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
