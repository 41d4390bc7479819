package clitree

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// serialTests are the tests kept serial for a reason the source does not show as a call
// (TestEveryTestParallelOrSerial finds the others), with the reason.
var serialTests = map[string]string{
	"TestMain":         "not a test",
	"TestRootHelpFile": "-update-root-help rewrites roothelp.txt and the package's rootHelpFile",
}

// serialCalls are the calls that keep a test serial: the process's environment (t.Setenv
// panics in a parallel test), working directory and umask, and the shared system libvirtd or
// fixed ports. Not os.Setenv: binary's sets the helper's path once, before any caller goes
// on, and nothing changes it back.
var serialCalls = []string{"t.Setenv", "os.Unsetenv", "os.Chdir", "t.Chdir", "syscall.Umask",
	"testenv.Libvirtd", "testenv.StartPrivateLibvirtd"}

// TestEveryTestParallelOrSerial: internal/clitree's tests run in parallel (#28), so every test
// of the package starts with t.Parallel(), unless it reaches one of serialCalls (itself or
// through a function of the package's tests it calls or names, such as fakeLibvirt's
// t.Setenv) or serialTests says why not; and a test that reaches one does not call
// t.Parallel (t.Setenv would panic, the libvirtd tests share the system daemon). A new test
// is parallel unless it says otherwise.
func TestEveryTestParallelOrSerial(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Body != nil {
				funcs[fd.Name.Name] = fd
			}
		}
	}
	// why[f] is the serial call f reaches, directly or through the functions it names.
	why := map[string]string{}
	uses := map[string][]string{}
	for name, fd := range funcs {
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok {
					for _, c := range serialCalls {
						if id.Name+"."+x.Sel.Name == c && why[name] == "" {
							why[name] = c
						}
					}
				}
			case *ast.Ident:
				if _, ok := funcs[x.Name]; ok && x.Name != name {
					uses[name] = append(uses[name], x.Name)
				}
			}
			return true
		})
	}
	for changed := true; changed; {
		changed = false
		for name, used := range uses {
			for _, u := range used {
				if why[name] == "" && why[u] != "" {
					why[name], changed = why[u]+" (through "+u+")", true
				}
			}
		}
	}
	var tests []string
	for name := range funcs {
		if strings.HasPrefix(name, "Test") {
			tests = append(tests, name)
		}
	}
	sort.Strings(tests)
	parallel := 0
	for _, name := range tests {
		fd := funcs[name]
		starts := false
		if len(fd.Body.List) > 0 {
			if es, ok := fd.Body.List[0].(*ast.ExprStmt); ok {
				if c, ok := es.X.(*ast.CallExpr); ok {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Parallel" && len(c.Args) == 0 {
						starts = true
					}
				}
			}
		}
		pos := fset.Position(fd.Pos())
		reason, listed := serialTests[name]
		switch {
		case starts && (why[name] != "" || listed):
			t.Errorf("%s (%s:%d) calls t.Parallel but is serial: %s%s", name, pos.Filename, pos.Line, why[name], reason)
		case !starts && why[name] == "" && !listed:
			t.Errorf("%s (%s:%d) does not start with t.Parallel(): add it, or the reason it must run alone to serialTests", name, pos.Filename, pos.Line)
		case starts:
			parallel++
		}
	}
	if parallel < len(tests)/2 {
		t.Errorf("%d of %d tests parallel: the check looks at the wrong thing", parallel, len(tests))
	}
}
