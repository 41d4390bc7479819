package archtest

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// vetTagSets are the build tag sets whose files make up the module's code, as `make lint`
// vets them (VET_TAGS in the Makefile): the untagged files and every !TAG file, then every tag
// the builds and tests use at once.
var vetTagSets = []string{"", "nvmlmock,crashtest,fakekernel"}

// funcVarsOf returns the package-level variables of pkg whose type is a function (declared so,
// a function literal, another function named as the value, a call that returns one, or a
// named type whose underlying type is a function), as "FILE:LINE:COL: var NAME".
func funcVarsOf(fset *token.FileSet, pkg *types.Package) []string {
	var out []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		v, ok := scope.Lookup(name).(*types.Var)
		if !ok {
			continue
		}
		if _, isFunc := v.Type().Underlying().(*types.Signature); isFunc {
			out = append(out, fset.Position(v.Pos()).String()+": var "+name)
		}
	}
	return out
}

// moduleFuncVars type-checks every package of the module (outside third_party/) from its
// non-test files under each of vetTagSets, and returns their package-level variables of
// function type (funcVarsOf), with paths relative to root, each once.
func moduleFuncVars(t *testing.T, root string) (found []string, packages int) {
	t.Helper()
	seen := map[string]bool{}
	checked := map[string]bool{}
	for _, tags := range vetTagSets {
		pkgs := listDeps(t, root, "-compiled", "-tags", tags, "./...")
		fset := token.NewFileSet()
		imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			p, ok := pkgs[path]
			if !ok || p.export == "" {
				return nil, fmt.Errorf("no export data for %s", path)
			}
			return os.Open(p.export)
		})
		for path, p := range pkgs {
			if !strings.HasPrefix(path, modulePath) || strings.HasPrefix(path, modulePath+"third_party/") || len(p.compiled) == 0 {
				continue
			}
			checked[path] = true
			var files []*ast.File
			for _, f := range p.compiled {
				if !filepath.IsAbs(f) {
					f = filepath.Join(p.dir, f)
				}
				af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, af)
			}
			conf := types.Config{Importer: imp}
			pkg, err := conf.Check(path, fset, files, nil)
			if err != nil {
				t.Fatalf("type-check %s (tags %q): %v", path, tags, err)
			}
			for _, b := range funcVarsOf(fset, pkg) {
				b = strings.TrimPrefix(b, root+"/")
				if !seen[b] {
					seen[b] = true
					found = append(found, b)
				}
			}
		}
	}
	sort.Strings(found)
	return found, len(checked)
}

// TestNoFunctionVariables: no package of the module (outside tests and third_party/) has a
// package-level variable holding a function. Such a variable is a seam tests swap by
// assigning it (crashAt, syncDir, groupsFromLinks, hostIO, openConn, migFor were), which
// keeps any two tests of the package from running at once: it is a field of the options or
// struct its code already takes (ledger.Ledger, the host scanner, clitree.Env), set by the
// callers, or a function a build tag chooses (crashHook).
func TestNoFunctionVariables(t *testing.T) {
	found, packages := moduleFuncVars(t, moduleRoot(t))
	if packages < 45 {
		t.Fatalf("type-checked only %d packages of the module", packages)
	}
	for _, b := range found {
		t.Errorf("a function in a package variable (make it a field of the options or struct the code takes): %s", b)
	}
}

// TestFunctionVariablesFound: the check sees a function in a package variable however it is
// spelt (a literal, a declared function type, a named function type, another function as the
// value, a call that returns one), and not a function declared as such, a variable of another
// type (a bool switch, a struct with a function field, a lazy value), or a function literal
// inside a function.
func TestFunctionVariablesFound(t *testing.T) {
	t.Parallel()
	const src = `package p
type Root struct{}
type hook func(point string)
type table struct{ New func() int }
func fetch(string) error { return nil }
func onceValue[T any](f func() T) func() T { return f }

var hostIO = func(root Root) (int, error) { return 0, nil }
var fetchISO = fetch
var (
	openConn func(string) error
	migFor, n = func() {}, 1
)
var crashAt hook
var lazyTable = onceValue(func() int { return 1 })

func hostIOOK(root Root) {}
var errX = error(nil)
var count = 3
var noOpenat2 = false
var lazy = table{New: func() int { return 1 }}
func f() { g := func() {}; g() }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{}).Check("p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range funcVarsOf(fset, pkg) {
		got = append(got, b[strings.LastIndex(b, " ")+1:])
	}
	sort.Strings(got)
	if want := "crashAt fetchISO hostIO lazyTable migFor openConn"; strings.Join(got, " ") != want {
		t.Errorf("found %v, want [%s]", got, want)
	}
}
