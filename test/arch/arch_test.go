// Package arch checks the package table of docs/architecture.md against
// the module: the table is the rule, parsed from the page, so the two
// cannot drift apart.
package arch

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// tableHeading is the heading the package table follows on the page.
const tableHeading = "## Packages"

// rule is one row of the table: the packages it covers, the module
// packages they may import directly, and those they must never reach, by
// any chain of imports.
type rule struct {
	line     int
	packages []string // patterns
	owns     string   // what they own, as the page says it
	imports  []string // patterns; empty: no module package
	never    []string // patterns
}

// pkg is one package of the module as go list sees it, with module-relative paths.
type pkg struct {
	path    string
	imports []string // direct imports of module packages
	deps    []string // every module package it reaches
}

// match says whether the module-relative path p matches pattern: the path
// itself, or for "x/..." x and everything under it.
func match(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return match(pat, p) })
}

// specificity orders the patterns that match one package: the package
// itself first, then the longest tree.
func specificity(pattern string) int {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return len(base)
	}
	return 1 << 20
}

var codeRE = regexp.MustCompile("`([^`]+)`")

// codes are the backticked names of a cell; "—" or nothing is none.
func codes(cell string) []string {
	var out []string
	for _, m := range codeRE.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// parseTable reads the first table after tableHeading: its rows are
// | package(s) | what it owns | imports | never reaches |.
func parseTable(doc []byte) ([]rule, error) {
	var rules []rule
	sc := bufio.NewScanner(bytes.NewReader(doc))
	n, in, started := 0, false, false
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == tableHeading:
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			if started {
				return rules, nil
			}
			continue
		}
		started = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			return nil, fmt.Errorf("line %d: %d cells, want 4 (package, owns, imports, never reaches): %q", n, len(cells), line)
		}
		first := strings.TrimSpace(cells[0])
		if first == "package" || strings.HasPrefix(first, "---") {
			continue
		}
		r := rule{line: n, packages: codes(cells[0]), owns: strings.TrimSpace(cells[1]), imports: codes(cells[2]), never: codes(cells[3])}
		if len(r.packages) == 0 {
			return nil, fmt.Errorf("line %d: a row names no package: %q", n, line)
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("no package table after %q", tableHeading)
	}
	return rules, sc.Err()
}

// ruleFor is the most specific rule covering p.
func ruleFor(rules []rule, p string) (*rule, bool) {
	var best *rule
	bestSpec := -1
	for i := range rules {
		for _, pat := range rules[i].packages {
			if s := specificity(pat); match(pat, p) && s > bestSpec {
				best, bestSpec = &rules[i], s
			}
		}
	}
	return best, best != nil
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// list is every package of the module built with tags, as go list says.
func list(t *testing.T, root, tags string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", tags, "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}", "./...")
	cmd.Dir = root
	// cgo files (the rma plane's libfabric binding) count whether or not a C compiler is here.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -tags %q: %v\n%s", tags, err, stderr.Bytes())
	}
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.TrimSpace(string(mod)) + "/"
	rel := func(field string) []string {
		var out []string
		for _, p := range strings.Fields(field) {
			if r, ok := strings.CutPrefix(p, prefix); ok {
				out = append(out, r)
			}
		}
		return out
	}
	var pkgs []pkg
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		p, ok := strings.CutPrefix(f[0], prefix)
		if !ok {
			continue // the module's root package, if it had one
		}
		pkgs = append(pkgs, pkg{path: p, imports: rel(f[1]), deps: rel(f[2])})
	}
	return pkgs
}

// violations are what the module does that the rules do not allow.
func violations(rules []rule, pkgs []pkg) []string {
	var out []string
	used := map[*rule]bool{}
	for _, p := range pkgs {
		r, ok := ruleFor(rules, p.path)
		if !ok {
			out = append(out, fmt.Sprintf("%s: no row of the package table covers it (add one)", p.path))
			continue
		}
		used[r] = true
		for _, imp := range p.imports {
			if !matchAny(r.imports, imp) {
				out = append(out, fmt.Sprintf("%s imports %s, which its row (line %d) does not allow: %v", p.path, imp, r.line, r.imports))
			}
		}
		for _, dep := range p.deps {
			if matchAny(r.never, dep) {
				out = append(out, fmt.Sprintf("%s reaches %s, which its row (line %d) forbids: never %v", p.path, dep, r.line, r.never))
			}
		}
	}
	for i := range rules {
		if !used[&rules[i]] {
			out = append(out, fmt.Sprintf("the row at line %d (%v) covers no package", rules[i].line, rules[i].packages))
		}
	}
	return out
}

func loadRules(t *testing.T, root string) []rule {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseTable(doc)
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	return rules
}

// TestImports: every package of the module, built with no tags and with
// every build tag the module has, imports only what its row of the
// package table allows and reaches nothing its row forbids; every package
// has a row and every row a package.
func TestImports(t *testing.T) {
	root := moduleRoot(t)
	rules := loadRules(t, root)
	for _, tags := range []string{"", "libfabric,faults,powercut,bench"} {
		t.Run("tags="+tags, func(t *testing.T) {
			if v := violations(rules, list(t, root, tags)); len(v) > 0 {
				t.Errorf("the module breaks the package table of docs/architecture.md:\n\t%s", strings.Join(v, "\n\t"))
			}
		})
	}
}

// TestTableKeepsTheRules: the table still says what the design depends on,
// so that loosening a row to let an import through fails here too.
func TestTableKeepsTheRules(t *testing.T) {
	rules := loadRules(t, moduleRoot(t))
	must := func(p string) *rule {
		r, ok := ruleFor(rules, p)
		if !ok {
			t.Fatalf("no row covers %s", p)
		}
		return r
	}
	for _, imp := range must("store").imports {
		if !match("artifact/...", imp) && !match("internal/...", imp) {
			t.Errorf("store may import %s: the store imports only artifact and internal packages", imp)
		}
	}
	for pkg, forbidden := range map[string]string{"snapshotter": "oci", "cri": "snapshotter"} {
		if !matchAny(must(pkg).never, forbidden) {
			t.Errorf("the row of %s no longer says it never reaches %s", pkg, forbidden)
		}
	}
	for _, r := range rules {
		if slices.ContainsFunc(r.packages, func(p string) bool { return match("cmd/...", p) }) {
			continue
		}
		for _, imp := range r.imports {
			// A containerd main (test/e2e/containerd-weightsnap) is the plugin's one user outside cmd/.
			if match("cmd/...", imp) && !(imp == "cmd/weightsnapd/plugin" && slices.ContainsFunc(r.packages, func(p string) bool { return match("test/...", p) })) {
				t.Errorf("the row at line %d lets %v import %s: nothing outside cmd/ imports cmd/... (but tests, the plugin)", r.line, r.packages, imp)
			}
		}
	}
}

// TestViolations: the checker itself catches a forbidden import, a
// forbidden reach, a package without a row and a row without a package.
func TestViolations(t *testing.T) {
	rules := []rule{
		{line: 1, packages: []string{"store"}, imports: []string{"artifact/..."}, never: []string{"peer"}},
		{line: 2, packages: []string{"artifact/..."}},
		{line: 3, packages: []string{"peer"}, imports: []string{"artifact/...", "store"}},
		{line: 4, packages: []string{"oci"}},
	}
	for _, tc := range []struct {
		name string
		pkgs []pkg
		want []string
	}{
		{name: "clean", pkgs: []pkg{{path: "store", imports: []string{"artifact"}, deps: []string{"artifact", "artifact/blake3"}},
			{path: "artifact"}, {path: "artifact/blake3"}, {path: "peer", imports: []string{"store"}, deps: []string{"store", "artifact"}}, {path: "oci"}}},
		{name: "forbidden import", pkgs: []pkg{{path: "store", imports: []string{"oci"}, deps: []string{"oci"}}, {path: "artifact"}, {path: "peer"}, {path: "oci"}},
			want: []string{"store imports oci"}},
		{name: "forbidden reach", pkgs: []pkg{{path: "store", imports: []string{"artifact"}, deps: []string{"artifact", "peer"}}, {path: "artifact"}, {path: "peer"}, {path: "oci"}},
			want: []string{"store reaches peer"}},
		{name: "no row", pkgs: []pkg{{path: "store"}, {path: "artifact"}, {path: "peer"}, {path: "oci"}, {path: "cri"}},
			want: []string{"cri: no row"}},
		{name: "no package", pkgs: []pkg{{path: "store"}, {path: "artifact"}, {path: "peer"}},
			want: []string{"line 4 ([oci]) covers no package"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := violations(rules, tc.pkgs)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d: %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}

// TestParseTable: the table's cells become rules; a row with another
// number of cells is refused rather than misread.
func TestParseTable(t *testing.T) {
	doc := "# x\n\n" + tableHeading + "\n\ntext\n\n| package | owns | imports | never reaches |\n|---|---|---|---|\n" +
		"| `store` | one domain | `artifact`, `internal/...` | `peer` |\n| `artifact/blake3`, `artifact/cast` | leaves | — | — |\n\nafter\n| `x` | y | z | w |\n"
	rules, err := parseTable([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || !slices.Equal(rules[0].imports, []string{"artifact", "internal/..."}) || !slices.Equal(rules[0].never, []string{"peer"}) ||
		!slices.Equal(rules[1].packages, []string{"artifact/blake3", "artifact/cast"}) || len(rules[1].imports) != 0 {
		t.Fatalf("%+v", rules)
	}
	if _, err := parseTable([]byte(tableHeading + "\n| `a` | b | c |\n")); err == nil {
		t.Fatal("a row of three cells was read")
	}
	if _, err := parseTable([]byte("# no table\n")); err == nil {
		t.Fatal("a page without the table was read")
	}
}
