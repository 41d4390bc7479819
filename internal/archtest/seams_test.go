package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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
// function type (funcVarsOf), with paths relative to root, each once; how many packages it
// checked; and the packages it checked again under a later tag set. A package is checked
// again only when go list gives it other files under that tag set than under the first
// (tagFilesDiffer): with the same files it declares the same variables.
func moduleFuncVars(t *testing.T, root string) (found []string, packages int, again map[string][]string) {
	t.Helper()
	seen := map[string]bool{}
	checked := map[string]bool{}
	again = map[string][]string{}
	var first map[string]listedPackage
	for i, tags := range vetTagSets {
		pkgs := listDeps(t, root, "-compiled", "-tags", tags, "./...")
		if i == 0 {
			first = pkgs
		}
		fset := token.NewFileSet()
		imp := exportImporter(fset, pkgs)
		for path, p := range pkgs {
			if !strings.HasPrefix(path, modulePath) || strings.HasPrefix(path, modulePath+"third_party/") || len(p.compiled) == 0 {
				continue
			}
			if i > 0 {
				if f, ok := first[path]; ok && !tagFilesDiffer(f, p) {
					continue
				}
				again[tags] = append(again[tags], path)
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
	return found, len(checked), again
}

// tagFilesDiffer reports whether a package's files under one tag set (a) are not those under
// another (b): go list's GoFiles, and CompiledGoFiles by name (cgo's output lives in the build
// cache under a path of its own).
func tagFilesDiffer(a, b listedPackage) bool {
	names := func(fs []string) string {
		var n []string
		for _, f := range fs {
			n = append(n, filepath.Base(f))
		}
		sort.Strings(n)
		return strings.Join(n, " ")
	}
	return a.dir != b.dir || names(a.files) != names(b.files) || names(a.compiled) != names(b.compiled)
}

// TestNoFunctionVariables: no package of the module (outside tests and third_party/) has a
// package-level variable holding a function. Such a variable is a seam tests swap by
// assigning it (crashAt, syncDir, groupsFromLinks, hostIO, openConn, migFor were), which
// keeps any two tests of the package from running at once: it is a field of the options or
// struct its code already takes (ledger.Ledger, the host scanner, clitree.Env), set by the
// callers, or a function a build tag chooses (crashHook).
func TestNoFunctionVariables(t *testing.T) {
	t.Parallel()
	found, packages, again := moduleFuncVars(t, moduleRoot(t))
	if packages < 45 {
		t.Fatalf("type-checked only %d packages of the module", packages)
	}
	// The tagged files are checked: internal/clitree has crashhook_crashtest.go under the
	// second tag set, and vfio no tagged file.
	tags := vetTagSets[len(vetTagSets)-1]
	if !slices.Contains(again[tags], modulePath+"internal/clitree") || slices.Contains(again[tags], modulePath+"vfio") {
		t.Fatalf("checked again under tags %q: %v; want internal/clitree (crashhook_crashtest.go) and not vfio", tags, again[tags])
	}
	t.Logf("%d packages type-checked; again under tags %q, with other files there: %d (%v)", packages, tags, len(again[tags]), again[tags])
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

// swapExceptions are the package variables a test may assign, each with why.
var swapExceptions = map[string]string{
	// The help the tree renders is embedded from roothelp.txt; -update-root-help rewrites
	// the file and the variable together, in a run that exists to do just that.
	"internal/clitree.rootHelpFile": "TestRootHelpFile -update-root-help",
}

// testSwaps returns the assignments in tests (files of dir ending _test.go) to package-level
// variables of the module's non-test code: vars maps a package directory (relative to the
// module) to its variables and imports maps an import path of the module to that directory.
// A name assigned bare counts when it is not declared in the test file (so it is the
// package's); one assigned as pkg.Name, when pkg is the module's package imported by that file.
func testSwaps(fset *token.FileSet, f *ast.File, dir string, vars map[string]map[string]bool) []string {
	imported := map[string]string{} // the file's name for an import -> its directory
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if !strings.HasPrefix(p, modulePath) {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imported[name] = strings.TrimPrefix(p, modulePath)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		a, ok := n.(*ast.AssignStmt)
		if !ok || a.Tok == token.DEFINE {
			return true
		}
		for _, l := range a.Lhs {
			var pkg, name string
			switch x := l.(type) {
			case *ast.Ident:
				if x.Obj == nil && !strings.HasSuffix(f.Name.Name, "_test") {
					pkg, name = dir, x.Name
				}
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Obj == nil {
					pkg, name = imported[id.Name], x.Sel.Name
				}
			}
			if name != "" && name != "_" && vars[pkg][name] {
				out = append(out, fmt.Sprintf("%s: %s.%s", fset.Position(l.Pos()), pkg, name))
			}
		}
		return true
	})
	return out
}

// TestTestsSwapNoPackageVariable: no test assigns a package-level variable of the module's
// code (the seams tests swapped: noOpenat2, LateDefineGrace, step.DetachTimeout, crashAt,
// syncDir, groupsFromLinks), which keeps every other test of the package from running beside
// it: a test sets a field of the options or struct it builds instead. swapExceptions are the
// ones left, each with why.
func TestTestsSwapNoPackageVariable(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	vars := map[string]map[string]bool{}
	tests := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (rel == "third_party" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		dir := filepath.Dir(rel)
		if strings.HasSuffix(path, "_test.go") {
			tests[dir] = append(tests[dir], f)
			return nil
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						if vars[dir] == nil {
							vars[dir] = map[string]bool{}
						}
						vars[dir][n.Name] = true
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) < 40 {
		t.Fatalf("found tests in only %d directories", len(tests))
	}
	used := map[string]bool{}
	for dir, files := range tests {
		for _, f := range files {
			for _, s := range testSwaps(fset, f, dir, vars) {
				key := s[strings.LastIndex(s, " ")+1:]
				if _, ok := swapExceptions[key]; ok {
					used[key] = true
					continue
				}
				t.Errorf("a test assigns a package variable (make it a field the test sets on what it builds): %s", strings.TrimPrefix(s, root+"/"))
			}
		}
	}
	for k := range swapExceptions {
		if !used[k] {
			t.Errorf("swapExceptions lists %s, which no test assigns any more: drop it", k)
		}
	}
}

// TestTestSwapsFound: the check sees a package variable assigned bare (in the package's own
// test file) or through the package's import (from another package's test, or an external
// test package), and not a local of the same name, a field, or a variable the test file
// declares itself.
func TestTestSwapsFound(t *testing.T) {
	t.Parallel()
	const src = `package p

import (
	"github.com/vgpu-host/vgpu-host/step"
	lc "github.com/vgpu-host/vgpu-host/lifecycle"
)

var mine = 1

func TestX(t *testing.T) {
	noOpenat2 = true
	defer func() { noOpenat2 = false }()
	step.DetachTimeout = 1
	lc.LateDefineGrace, mine = 2, 2
	crashAt := 1
	crashAt = 2
	var o struct{ syncDir int }
	o.syncDir = 1
	step.Other = 1
	_ = crashAt
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]map[string]bool{
		"p":         {"noOpenat2": true, "crashAt": true, "syncDir": true},
		"step":      {"DetachTimeout": true},
		"lifecycle": {"LateDefineGrace": true},
	}
	var got []string
	for _, s := range testSwaps(fset, f, "p", vars) {
		got = append(got, s[strings.LastIndex(s, " ")+1:])
	}
	if want := "p.noOpenat2 p.noOpenat2 step.DetachTimeout lifecycle.LateDefineGrace"; strings.Join(got, " ") != want {
		t.Errorf("found %v, want [%s]", got, want)
	}
}
