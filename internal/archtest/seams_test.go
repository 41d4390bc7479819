package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// treePackages are the command tree and what the mains add to it: their ways to the host are
// fields of clitree.Env, given by the main (or a test) to the tree it builds, never package
// variables that tests swap (issue #28).
var treePackages = []string{"internal/clitree", "internal/agentcmd", "cmd/vgpu-host", "cmd/vgpu-host-agent"}

// funcVars returns the package-level variables of f that hold a function: a function literal,
// a variable declared with a function type, or another name as the value (a function named as
// a value reads like any other name without types).
func funcVars(fset *token.FileSet, f *ast.File) []string {
	var bad []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			_, funcType := vs.Type.(*ast.FuncType)
			for i, name := range vs.Names {
				isFunc := funcType
				if i < len(vs.Values) {
					switch vs.Values[i].(type) {
					case *ast.FuncLit:
						isFunc = true
					case *ast.SelectorExpr, *ast.Ident:
						// Another name as the value (var fetchISO = httpget.Fetch): without
						// types, a function reads like any other value, so every such alias
						// counts (a constant is a const; nothing else in the tree is one).
						isFunc = true
					}
				}
				if isFunc {
					bad = append(bad, fset.Position(name.Pos()).String()+": var "+name.Name)
				}
			}
		}
	}
	return bad
}

// TestNoSeamVariablesInTree: no non-test file of the command tree or its mains declares a
// package-level variable holding a function, the seams tests used to swap (hostIO, openConn,
// migFor, fetchISO): each is a field of clitree.Env.
func TestNoSeamVariablesInTree(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var bad []string
	files := 0
	for _, p := range treePackages {
		matches, err := filepath.Glob(filepath.Join(root, p, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			if strings.HasSuffix(m, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, m, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files++
			for _, b := range funcVars(fset, f) {
				bad = append(bad, strings.TrimPrefix(b, root+"/"))
			}
		}
	}
	if files < 40 {
		t.Fatalf("found only %d Go files in %v", files, treePackages)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("a seam in a package variable (make it a field of clitree.Env): %s", b)
	}
}

// TestSeamVariablesFound: the check sees the seams as the tree had them, and not a function
// declared as such, a variable of another type or a function literal inside a function.
func TestSeamVariablesFound(t *testing.T) {
	const src = `package p
var hostIO = func(root host.Root) (host.Writer, host.ModuleLoader) { return nil, nil }
var fetchISO = httpget.Fetch
var (
	openConn func(string) error
	migFor, n = func() {}, 1
)
func hostIOOK(root host.Root) {}
var errX = errors.New("x")
var count = 3
var once sync.Once
func f() { g := func() {}; g() }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range funcVars(fset, f) {
		got = append(got, b[strings.LastIndex(b, " ")+1:])
	}
	if strings.Join(got, " ") != "hostIO fetchISO openConn migFor" {
		t.Errorf("found %v, want [hostIO fetchISO openConn migFor]", got)
	}
}
