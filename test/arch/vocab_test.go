package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// retiredIDNames are the names an artifact.ID went by before it was
// called ID everywhere (docs/architecture.md's glossary).
var retiredIDNames = []string{"Digest", "IdentityDigest", "Identity", "Known"}

// isArtifactID reports whether the type expression e, in a file of package
// pkg, is artifact.ID, a pointer to one or a slice of them.
func isArtifactID(pkg string, e ast.Expr) bool {
	switch t := e.(type) {
	case *ast.StarExpr:
		return isArtifactID(pkg, t.X)
	case *ast.ArrayType:
		return isArtifactID(pkg, t.Elt)
	case *ast.Ident:
		return pkg == "artifact" && t.Name == "ID"
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		return ok && x.Name == "artifact" && t.Sel.Name == "ID"
	}
	return false
}

// recordNever are the words a trust record never goes by in a declared
// name (the glossary's "record"): it is a Record.
var recordNever = []string{"Attestation", "SignatureFile"}

// declaredNames are the identifiers n declares: a function, a type, a
// constant or variable, a field or parameter, a short variable.
func declaredNames(n ast.Node) []*ast.Ident {
	switch n := n.(type) {
	case *ast.FuncDecl:
		return []*ast.Ident{n.Name}
	case *ast.TypeSpec:
		return []*ast.Ident{n.Name}
	case *ast.ValueSpec:
		return n.Names
	case *ast.Field:
		return n.Names
	case *ast.AssignStmt:
		var out []*ast.Ident
		if n.Tok == token.DEFINE {
			for _, e := range n.Lhs {
				if id, ok := e.(*ast.Ident); ok {
					out = append(out, id)
				}
			}
		}
		return out
	}
	return nil
}

// vocabulary lists what in src breaks the glossary: a field or parameter
// of type artifact.ID under a retired name, an identifier named
// PeerError, the spelling materialize, and a declared name that calls a
// trust record anything but a record.
func vocabulary(fset *token.FileSet, f *ast.File) []string {
	var bad []string
	at := func(n ast.Node, format string) {
		bad = append(bad, fset.Position(n.Pos()).String()+": "+format)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		for _, id := range declaredNames(n) {
			for _, never := range recordNever {
				if namedLike(id.Name, never) {
					at(id, id.Name+": a trust record is a Record, never "+never)
				}
			}
		}
		switch n := n.(type) {
		case *ast.Field:
			if isArtifactID(f.Name.Name, n.Type) {
				for _, name := range n.Names {
					if slices.Contains(retiredIDNames, name.Name) {
						at(name, "an artifact.ID named "+name.Name+", not ID")
					}
				}
			}
		case *ast.Ident:
			if n.Name == "PeerError" {
				at(n, "PeerError stutters: peer.Error")
			}
			if strings.Contains(strings.ToLower(n.Name), "materializ") {
				at(n, n.Name+": the spelling is materialise")
			}
		}
		return true
	})
	return bad
}

// TestVocabulary: the module's Go files keep the glossary's names.
func TestVocabulary(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		bad = append(bad, vocabulary(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("the glossary's names are broken:\n\t%s", strings.Join(bad, "\n\t"))
	}
}

func TestVocabularyCatches(t *testing.T) {
	src := `package resolve
type Request struct { Digest artifact.ID; Ok artifact.ID; Known []artifact.ID }
func f(Identity *artifact.ID) {}
type PeerError struct{}
func materializeIt() {}
type attestationStore struct{}
func g() { omsSignatureFile := ""; _ = omsSignatureFile }`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bad := vocabulary(fset, f); len(bad) != 7 {
		t.Errorf("got %d findings, want 7 (Digest, Known, Identity, PeerError, materializeIt, attestationStore, omsSignatureFile):\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
