package archtest

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var showClimbs = flag.Bool("show-climbs", false, "log the VM's path through Lifecycle.Apply, one move a line")

// maxApplyClimbs bounds the climbs back up on the VM's path through Lifecycle.Apply
// (TestApplyClimbs). Lower it when a change lowers the count; never raise it to let a change in.
const maxApplyClimbs = 10

// vmData are the types that carry a VM on its way through apply: its spec, its resolution,
// its plan and the plan's steps, its claims, its domain. A call that hands one of them (as an
// argument or as the receiver) to another package moves the VM there.
var vmData = map[string]bool{
	modulePath + "domains.VM":          true,
	modulePath + "domains.Allocation":  true,
	modulePath + "lifecycle.VMPlan":    true,
	modulePath + "lifecycle.Plan":      true, // the name before it said whose plan it is
	modulePath + "step.Step":           true,
	modulePath + "step.Planned":        true,
	modulePath + "vgpu.Claim":          true,
	"libvirt.org/go/libvirtxml.Domain": true,
}

// carriesVM reports whether a value of type t carries the VM (through pointers, slices and
// variadic lists).
func carriesVM(t types.Type) bool {
	for {
		switch u := t.(type) {
		case *types.Pointer:
			t = u.Elem()
			continue
		case *types.Slice:
			t = u.Elem()
			continue
		case *types.Alias:
			t = types.Unalias(u)
			continue
		case *types.Named:
			o := u.Obj()
			return o.Pkg() != nil && vmData[o.Pkg().Path()+"."+o.Name()]
		}
		return false
	}
}

// listedPackage is what go list says of one package.
type listedPackage struct {
	path, export, dir string
	files             []string
	// compiled are the Go files the compiler reads, cgo's output for a package using cgo
	// (absolute paths; only when go list is given -compiled).
	compiled []string
}

// listDeps lists the packages args name (go list's flags and patterns) and their
// dependencies with their export data (go list -export builds what is missing into the build
// cache).
func listDeps(t *testing.T, root string, args ...string) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-export", "-f",
		"{{.ImportPath}}\t{{.Export}}\t{{.Dir}}\t{{join .GoFiles \" \"}}\t{{join .CompiledGoFiles \" \"}}"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]listedPackage{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 5 {
			continue
		}
		pkgs[f[0]] = listedPackage{path: f[0], export: f[1], dir: f[2], files: strings.Fields(f[3]), compiled: strings.Fields(f[4])}
	}
	return pkgs
}

// funcBody is one function of a package type-checked from source.
type funcBody struct {
	pkg  string
	decl *ast.FuncDecl
	info *types.Info
}

// exportImporter imports the packages among pkgs from their export data (go list -export).
func exportImporter(fset *token.FileSet, pkgs map[string]listedPackage) types.Importer {
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := pkgs[path]
		if !ok || p.export == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(p.export)
	})
}

// callGraph type-checks the module's packages among pkgs from source (their imports from
// export data) and returns their functions by types.Func.FullName.
func callGraph(t *testing.T, pkgs map[string]listedPackage) map[string]funcBody {
	t.Helper()
	fset := token.NewFileSet()
	imp := exportImporter(fset, pkgs)
	funcs := map[string]funcBody{}
	for path, p := range pkgs {
		if !strings.HasPrefix(path, modulePath) {
			continue
		}
		var files []*ast.File
		for _, f := range p.files {
			af, err := parser.ParseFile(fset, filepath.Join(p.dir, f), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, af)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(path, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", path, err)
		}
		for _, f := range files {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					if fn, ok := info.Defs[fd.Name].(*types.Func); ok {
						funcs[fn.FullName()] = funcBody{pkg: path, decl: fd, info: info}
					}
				}
			}
		}
	}
	return funcs
}

// move is one call on the VM's path: from package to package, through callee.
type move struct{ from, to, callee string }

// vmPath follows the VM from the function start: every call (in source order, each function
// followed once) whose callee is in the module and that hands it one of the VM's values. A
// call into another package is a move down; its return, a climb back up. Calls inside a
// package are followed without counting; an interface method call counts as a move into
// the interface's package, not followed further (the implementation is chosen at run time).
func vmPath(funcs map[string]funcBody, start string) []move {
	var out []move
	seen := map[string]bool{}
	var walk func(name string)
	walk = func(name string) {
		fb, ok := funcs[name]
		if !ok || seen[name] {
			return
		}
		seen[name] = true
		ast.Inspect(fb.decl.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fn, recv := callee(fb.info, call)
			if fn == nil || fn.Pkg() == nil || !strings.HasPrefix(fn.Pkg().Path(), modulePath) {
				return true
			}
			carries := recv != nil && carriesVM(recv)
			for _, a := range call.Args {
				if tv, ok := fb.info.Types[a]; ok && carriesVM(tv.Type) {
					carries = true
				}
			}
			sig := fn.Type().(*types.Signature)
			iface := sig.Recv() != nil && types.IsInterface(sig.Recv().Type())
			to := fn.Pkg().Path()
			if to != fb.pkg {
				if !carries {
					return true
				}
				out = append(out, move{from: fb.pkg, to: to, callee: fn.FullName()})
			}
			if !iface {
				walk(fn.FullName())
			}
			return true
		})
	}
	walk(start)
	return out
}

// callee returns the function a call calls and the type of its receiver (nil for a plain
// function); nil for a call of a func value, a conversion or a builtin.
func callee(info *types.Info, call *ast.CallExpr) (*types.Func, types.Type) {
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		fn, _ := info.Uses[f].(*types.Func)
		return fn, nil
	case *ast.SelectorExpr:
		if sel, ok := info.Selections[f]; ok {
			if sel.Kind() != types.MethodVal {
				return nil, nil
			}
			fn, _ := sel.Obj().(*types.Func)
			return fn, sel.Recv()
		}
		fn, _ := info.Uses[f.Sel].(*types.Func)
		return fn, nil
	case *ast.IndexExpr: // a generic function's instance
		if id, ok := f.X.(*ast.Ident); ok {
			fn, _ := info.Uses[id].(*types.Func)
			return fn, nil
		}
	}
	return nil, nil
}

// TestApplyClimbs follows the VM through Lifecycle.Apply (issue 28: "following the VM through
// Lifecycle.Apply, at most 10 climbs back up between packages"). The path is read from the
// code, not a run: a static walk of the calls that hand the VM's values (vmData) from one
// package to another, each call site once. Every such call goes down into a package and
// climbs back up when it returns, so the climbs are the calls; -show-climbs lists them.
func TestApplyClimbs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("type-checks lifecycle and its dependencies (a few seconds)")
	}
	root := moduleRoot(t)
	pkgs := listDeps(t, root, "./lifecycle")
	funcs := callGraph(t, pkgs)
	start := "(*" + modulePath + "lifecycle.Lifecycle).Apply"
	if _, ok := funcs[start]; !ok {
		t.Fatalf("%s not found", start)
	}
	path := vmPath(funcs, start)
	var lines []string
	for _, m := range path {
		lines = append(lines, fmt.Sprintf("%s -> %s (%s)", strings.TrimPrefix(m.from, modulePath), strings.TrimPrefix(m.to, modulePath), strings.ReplaceAll(m.callee, modulePath, "")))
	}
	pkgsOnPath := map[string]bool{}
	for _, m := range path {
		pkgsOnPath[m.from], pkgsOnPath[m.to] = true, true
	}
	t.Logf("the VM through Lifecycle.Apply: %d packages, %d moves, %d climbs back up", len(pkgsOnPath), 2*len(path), len(path))
	if *showClimbs {
		t.Log("\n" + strings.Join(lines, "\n"))
	}
	if len(path) > maxApplyClimbs {
		t.Errorf("the VM climbs back up %d times through Lifecycle.Apply, more than %d:\n%s", len(path), maxApplyClimbs, strings.Join(lines, "\n"))
	}
}

// TestVMPathFollowsTheVM checks the walk on a small program: only calls that hand the VM to
// another package count, calls inside a package are followed, and a function is walked once.
func TestVMPathFollowsTheVM(t *testing.T) {
	t.Parallel()
	const src = `package lifecycle
import "github.com/vgpu-host/vgpu-host/vgpu"
type VMPlan struct{ Claims []vgpu.Claim }
func (p *VMPlan) keys() []string {
	var out []string
	for _, c := range p.Claims { out = append(out, c.Key()) } // hands a Claim to vgpu: counts
	return out
}
func Apply(p *VMPlan) {
	_ = p.keys()
	_ = p.keys()                 // walked once
	_ = vgpu.DomainUUID("name")  // no VM value: not a move
}
`
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	root := moduleRoot(t)
	pkgs := listDeps(t, root, "./vgpu")
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if p, ok := pkgs[path]; ok && p.export != "" {
			return os.Open(p.export)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
	pk, err := (&types.Config{Importer: imp}).Check(modulePath+"lifecycle", fset, []*ast.File{af}, info)
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]funcBody{}
	for _, d := range af.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			funcs[info.Defs[fd.Name].(*types.Func).FullName()] = funcBody{pkg: pk.Path(), decl: fd, info: info}
		}
	}
	path := vmPath(funcs, modulePath+"lifecycle.Apply")
	if len(path) != 1 || path[0].to != modulePath+"vgpu" || !strings.HasSuffix(path[0].callee, "vgpu.Claim).Key") {
		t.Fatalf("path = %+v, want one move into vgpu through Claim.Key", path)
	}
	if !slices.ContainsFunc(path, func(m move) bool { return m.from == modulePath+"lifecycle" }) {
		t.Fatalf("path = %+v: the move is from lifecycle", path)
	}
}
