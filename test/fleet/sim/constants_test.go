package sim

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestConstantsMatchPeer reads peer/'s constants from its source and checks the model's copies:
// a change there fails here until the model follows.
func TestConstantsMatchPeer(t *testing.T) {
	consts := peerConstants(t)
	for _, c := range []struct {
		name string
		sim  int64
	}{
		{"DefaultMaxChildren", DefaultMaxChildren},
		{"DefaultRootWait", int64(RootWait)},
		{"reaskFirst", int64(ReaskFirst)},
		{"reaskMax", int64(ReaskMax)},
		{"listTimeout", int64(ListTimeout)},
		{"orphanSettle", int64(OrphanSettle)},
		{"orphanStep", int64(OrphanStep)},
		{"retryFirst", int64(RetryFirst)},
		{"retryMax", int64(RetryMax)},
		{"DefaultTimeout", int64(SessionTimeout)},
	} {
		got, ok := consts[c.name]
		if !ok {
			t.Errorf("peer/ has no constant %s any more: the model's copy is stale", c.name)
			continue
		}
		if got != c.sim {
			t.Errorf("peer's %s is %d, the model's %d", c.name, got, c.sim)
		}
	}
}

// peerConstants evaluates the integer and time.Duration constants declared in peer/*.go whose
// values are literals, time units, other such constants, * and <<.
func peerConstants(t *testing.T) map[string]int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "peer", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("peer/'s source: %v (%d files)", err, len(files))
	}
	exprs := map[string]ast.Expr{}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						exprs[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	out := map[string]int64{}
	for name, e := range exprs {
		if v, err := eval(e, exprs, 0); err == nil {
			out[name] = v
		}
	}
	return out
}

var timeUnits = map[string]int64{"Nanosecond": int64(time.Nanosecond), "Microsecond": int64(time.Microsecond),
	"Millisecond": int64(time.Millisecond), "Second": int64(time.Second), "Minute": int64(time.Minute)}

func eval(e ast.Expr, exprs map[string]ast.Expr, depth int) (int64, error) {
	if depth > 8 {
		return 0, fmt.Errorf("too deep")
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.INT {
			return strconv.ParseInt(e.Value, 0, 64)
		}
	case *ast.ParenExpr:
		return eval(e.X, exprs, depth+1)
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			if v, ok := timeUnits[e.Sel.Name]; ok {
				return v, nil
			}
		}
	case *ast.Ident:
		if x, ok := exprs[e.Name]; ok {
			return eval(x, exprs, depth+1)
		}
	case *ast.BinaryExpr:
		a, err := eval(e.X, exprs, depth+1)
		if err != nil {
			return 0, err
		}
		b, err := eval(e.Y, exprs, depth+1)
		if err != nil {
			return 0, err
		}
		switch e.Op {
		case token.MUL:
			return a * b, nil
		case token.SHL:
			return a << b, nil
		}
	}
	return 0, fmt.Errorf("not a constant the model reads")
}
