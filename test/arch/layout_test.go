package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

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
