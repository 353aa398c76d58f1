package arch

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
