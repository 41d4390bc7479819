// Package archtest holds tests of the code base's shape: rules that keep one place for each
// fact, checked on the source itself.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// moduleRoot is the repository root (two levels up from this package).
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", dir)
	}
	return dir
}

// readers are the calls that read a file or directory.
var readers = map[string]bool{
	"os.ReadFile": true, "os.ReadDir": true, "os.Readlink": true, "os.Stat": true, "os.Lstat": true,
	"os.Open": true, "os.OpenFile": true, "os.DirFS": true, "filepath.Glob": true, "filepath.WalkDir": true,
	"filepath.Walk": true, "filepath.EvalSymlinks": true, "syscall.Open": true, "unix.Openat2": true,
	"host.ReadString": true, "host.ReadInt": true, "host.ReadHex": true, "host.LinkBase": true, "host.Exists": true,
	"fs.ReadFile": true, "fs.ReadDir": true, "fs.Stat": true, "fs.Glob": true, "fs.WalkDir": true, "fs.Sub": true,
	"bufio.NewScanner": false,
}

// rootReaders are host.Root's methods that read the path they are given (inside the root): a
// read of the host all the same when the path is sysfs, /proc or /dev.
var rootReaders = map[string]bool{"ReadDir": true, "Readlink": true, "Stat": true, "Lstat": true, "Exists": true, "ReadHostFile": true}

// sysfsMakers are the host.Root methods that build a path under /sys, /proc or /dev.
var sysfsMakers = map[string]bool{"Sys": true, "PCIDevice": true, "PCIDriver": true, "Proc": true, "Dev": true}

// hostTops are the top directories of a root that only host reads, as a relative path (an
// argument of Root.Path or filepath.Join after the root, or a path inside os.DirFS) spells them.
var hostTops = []string{"sys", "proc", "dev"}

// isHostRel reports whether e is a string literal naming one of hostTops or a path under it
// ("sys", "proc/self/mountinfo").
func isHostRel(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	v, err := strconv.Unquote(lit.Value)
	if err != nil {
		return false
	}
	for _, top := range hostTops {
		if v == top || strings.HasPrefix(v, top+"/") {
			return true
		}
	}
	return false
}

// isRootDir reports whether e is a root's directory: a call with no arguments of a method
// Dir or Path (host.Root's; filepath.Dir always takes one), or a field Root joined as a path
// (an Inventory's: a string, where host.Root, a struct, would not compile).
func isRootDir(e ast.Expr) bool {
	if s, ok := e.(*ast.SelectorExpr); ok && s.Sel.Name == "Root" {
		return true
	}
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 0 {
		return false
	}
	fn, ok := c.Fun.(*ast.SelectorExpr)
	return ok && (fn.Sel.Name == "Dir" || fn.Sel.Name == "Path")
}

// readsHost reports whether call reads sysfs, /proc or /dev: a reader given a sysfs path,
// os.DirFS over a root's directory (every read through it is a host read the paths cannot
// show), or an fs function reading a path under sys, proc or dev of a file system.
func readsHost(call *ast.CallExpr, tainted, pathFuncs map[string]bool, readFuncs map[string]bool) bool {
	name := callName(call)
	sel, isSel := call.Fun.(*ast.SelectorExpr)
	if !(readers[name] || readFuncs[localName(call)] || isSel && rootReaders[sel.Sel.Name]) {
		return false
	}
	if name == "os.DirFS" && len(call.Args) == 1 && isRootDir(call.Args[0]) {
		return true
	}
	if strings.HasPrefix(name, "fs.") && len(call.Args) > 1 && isHostRel(call.Args[1]) {
		return true
	}
	for _, a := range call.Args {
		if isSysfs(a, tainted, pathFuncs) {
			return true
		}
	}
	return false
}

// TestOnlyHostReadsTheHost fails when a package other than host (and host's test helpers)
// reads sysfs, /proc or /dev: a call that reads a file whose path was built with a Root's
// Sys, PCIDevice, PCIDriver, Proc or Dev (directly, through a variable, or through a function
// of the same package that returns such a path), or from a "/sys" or "/proc" literal; the same
// path spelt by hand (r.Path("sys", ...), filepath.Join(r.Dir(), "sys", ...)); os.DirFS over
// the root's directory; or an fs.ReadFile-like read of "sys/...", "proc/..." or "dev/...". Writing
// to such a path (through host.Writer) is every package's right; reading is host's job.
func TestOnlyHostReadsTheHost(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	pkgs := map[string][]*ast.File{}
	fset := token.NewFileSet()
	parseSources(t, root, fset, func(rel string) bool { return rel == "host" }, func(rel string, f *ast.File) {
		pkgs[filepath.Dir(rel)] = append(pkgs[filepath.Dir(rel)], f)
	})
	if len(pkgs) < 8 {
		t.Fatalf("found only %d packages under %s", len(pkgs), root)
	}
	var bad []string
	for dir, files := range pkgs {
		for _, v := range violations(fset, files) {
			bad = append(bad, dir+": "+v)
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("reads the host outside package host: %s", b)
	}
}

// violations finds the sysfs reads of one package's files.
func violations(fset *token.FileSet, files []*ast.File) []string {
	// Functions of the package that return a sysfs path, found by fixed point.
	pathFuncs := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, f := range files {
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil || pathFuncs[fd.Name.Name] {
					continue
				}
				tainted := taintedIdents(fd.Body, pathFuncs, nil)
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if r, ok := n.(*ast.ReturnStmt); ok {
						for _, e := range r.Results {
							if isSysfs(e, tainted, pathFuncs) && !pathFuncs[fd.Name.Name] {
								pathFuncs[fd.Name.Name], changed = true, true
							}
						}
					}
					return true
				})
			}
		}
	}
	// Functions of the package that read a path they are given (a parameter passed to a
	// reader), found by fixed point: calling one with a sysfs path is reading sysfs.
	readFuncs := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, f := range files {
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil || readFuncs[fd.Name.Name] {
					continue
				}
				params := map[string]bool{}
				for _, fl := range fd.Type.Params.List {
					for _, n := range fl.Names {
						params[n.Name] = true
					}
				}
				params = taintedIdents(fd.Body, nil, params)
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok && readsHost(call, params, nil, readFuncs) && !readFuncs[fd.Name.Name] {
						readFuncs[fd.Name.Name], changed = true, true
					}
					return true
				})
			}
		}
	}
	var out []string
	for _, f := range files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			tainted := taintedIdents(fd.Body, pathFuncs, nil)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && readsHost(call, tainted, pathFuncs, readFuncs) {
					out = append(out, fset.Position(call.Pos()).String()+" "+callName(call)+localName(call)+" in "+fd.Name.Name)
				}
				return true
			})
		}
	}
	return out
}

// taintedIdents are the variables of body assigned a sysfs path (repeated to a fixed point so
// that a path joined from another counts).
func taintedIdents(body *ast.BlockStmt, pathFuncs, seed map[string]bool) map[string]bool {
	tainted := map[string]bool{}
	for k := range seed {
		tainted[k] = true
	}
	for changed := true; changed; {
		changed = false
		ast.Inspect(body, func(n ast.Node) bool {
			var lhs, rhs []ast.Expr
			switch s := n.(type) {
			case *ast.AssignStmt:
				lhs, rhs = s.Lhs, s.Rhs
			case *ast.ValueSpec:
				for _, id := range s.Names {
					lhs = append(lhs, id)
				}
				rhs = s.Values
			default:
				return true
			}
			for i, l := range lhs {
				id, ok := l.(*ast.Ident)
				if !ok || tainted[id.Name] || i >= len(rhs) && len(rhs) != 1 {
					continue
				}
				r := rhs[0]
				if i < len(rhs) {
					r = rhs[i]
				}
				if isSysfs(r, tainted, pathFuncs) {
					tainted[id.Name], changed = true, true
				}
			}
			return true
		})
	}
	return tainted
}

// isSysfs reports whether expression e contains a sysfs path: a Root path maker call, a
// tainted variable, a call to a path function, or a "/sys"/"/proc" literal.
func isSysfs(e ast.Expr, tainted, pathFuncs map[string]bool) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CallExpr:
			switch fn := x.Fun.(type) {
			case *ast.SelectorExpr:
				if sysfsMakers[fn.Sel.Name] || pathFuncs[fn.Sel.Name] {
					found = true
				}
				// r.Path("sys", ...): the maker spelt by hand.
				if fn.Sel.Name == "Path" && len(x.Args) > 0 && isHostRel(x.Args[0]) {
					found = true
				}
				// filepath.Join(r.Dir(), "sys", ...).
				if n := callName(x); (n == "filepath.Join" || n == "path.Join") && len(x.Args) > 1 &&
					isRootDir(x.Args[0]) && isHostRel(x.Args[1]) {
					found = true
				}
			case *ast.Ident:
				if pathFuncs[fn.Name] {
					found = true
				}
			}
		case *ast.Ident:
			if tainted[x.Name] {
				found = true
			}
		case *ast.BasicLit:
			if x.Kind == token.STRING && (strings.HasPrefix(x.Value, `"/sys`) || strings.HasPrefix(x.Value, `"/proc`)) {
				found = true
			}
		case *ast.FuncLit:
			return false
		}
		return !found
	})
	return found
}

// localName is the name of a call to a function or method of the package ("" for others).
func localName(c *ast.CallExpr) string {
	switch fn := c.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok && (x.Name == "os" || x.Name == "host" || x.Name == "filepath" || x.Name == "syscall") {
			return ""
		}
		return fn.Sel.Name
	}
	return ""
}

func callName(c *ast.CallExpr) string {
	if s, ok := c.Fun.(*ast.SelectorExpr); ok {
		if x, ok := s.X.(*ast.Ident); ok {
			return x.Name + "." + s.Sel.Name
		}
	}
	return ""
}

// TestViolationsFound: the checker itself finds the ways a package reads sysfs (directly,
// through a variable, through a path function, through a reading helper, the Root's path
// spelt by hand with Path or filepath.Join over Dir, os.DirFS over the root or an fs read of
// a path under sys) and passes writes and reads of other files.
func TestViolationsFound(t *testing.T) {
	t.Parallel()
	src := `package p
func direct(r host.Root)        { os.ReadFile(r.PCIDevice(a, "class")) }
func viaVar(r host.Root)        { dir := r.Sys("class", "mdev_bus"); os.ReadDir(dir) }
func busDir(r host.Root) string { return r.Sys("bus", "pci", "devices") }
func viaFunc(r host.Root)       { os.ReadDir(busDir(r)) }
func readHelper(p string)       { os.ReadFile(p) }
func viaHelper(r host.Root)     { readHelper(filepath.Join(r.Sys("x"), "y")) }
func literal()                  { host.ReadString("/sys/kernel/iommu_groups") }
func write(r host.Root, w host.Writer) { w.Write(ctx, r.PCIDevice(a, "driver_override"), "vfio-pci") }
func config(r host.Root)        { os.ReadFile(r.Etc("vgpu-host", "sriov.json")) }
func byPath(r host.Root)        { os.ReadDir(r.Path("sys", "bus", "pci", "devices")) }
func byPathJoined(r host.Root)  { host.ReadString(r.Path("proc/self/mountinfo")) }
func byJoin(r host.Root)        { os.ReadFile(filepath.Join(r.Dir(), "sys", "kernel", "iommu_groups")) }
func byJoinVar(r host.Root)     { p := filepath.Join(r.Dir(), "dev/vfio"); os.Stat(p) }
func dirFSRoot(r host.Root)     { fsys := os.DirFS(r.Dir()); _ = fsys }
func dirFSSys(r host.Root)      { os.DirFS(r.Sys("class")) }
func fsRead(fsys fs.FS)         { fs.ReadFile(fsys, "sys/bus/pci/devices/0000:41:00.0/class") }
func etcByPath(r host.Root)     { os.ReadFile(r.Path("etc", "vgpu-host", "sriov.json")) }
func nearJoin(p string)         { os.ReadFile(filepath.Join(filepath.Dir(p), "sys")) }
func fsOther(fsys fs.FS)        { fs.ReadFile(fsys, "system.yaml"); fs.ReadFile(fsys, "examples/sys.yaml") }
func dirFSEtc(r host.Root)      { os.DirFS(r.Etc("vgpu-host")) }
func writeByPath(r host.Root, w host.Writer) { w.Write(ctx, r.Path("sys", "bus", "pci", "rescan"), "1") }
func invRoot(inv *host.Inventory)  { host.Exists(filepath.Join(inv.Root, "dev", "kvm")) }
func rootMethod(r host.Root)      { r.ReadDir(r.Sys("class", "mdev_bus")) }
func rootMethodState(r host.Root) { r.ReadDir(r.StateDir("vms")); f.Stat() }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := violations(fset, []*ast.File{f})
	var funcs []string
	for _, v := range got {
		funcs = append(funcs, v[strings.LastIndex(v, " ")+1:])
	}
	sort.Strings(funcs)
	want := []string{"byJoin", "byJoinVar", "byPath", "byPathJoined", "dirFSRoot", "dirFSSys", "direct", "fsRead", "invRoot", "literal", "rootMethod", "viaFunc", "viaHelper", "viaVar"}
	if strings.Join(funcs, ",") != strings.Join(want, ",") {
		t.Fatalf("found %v, want reads in %v", got, want)
	}
}

// parseSources parses every non-test Go file under root that the binaries build from (not
// hidden directories, bin, test, testdata, nor the directories skip names by their path
// relative to root) and hands each to fn with that path.
func parseSources(t *testing.T, root string, fset *token.FileSet, skip func(rel string) bool, fn func(rel string, f *ast.File)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bin" || rel == "test" || skip(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		fn(rel, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
