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

// rawHostReaders are the calls that read a path as the kernel resolves it from "/": under a
// --host-root other than "/", a link in the tree would lead them out of it. Package host reads
// its tree through Root's methods instead (host/treeread.go), which resolve inside the root.
var rawHostReaders = map[string]bool{
	"os.ReadFile": true, "os.ReadDir": true, "os.Readlink": true, "os.Stat": true, "os.Lstat": true,
	"os.Open": true, "os.OpenFile": true, "os.DirFS": true, "filepath.Glob": true, "filepath.WalkDir": true,
	"filepath.Walk": true, "filepath.EvalSymlinks": true, "unix.Open": true, "unix.Openat": true, "unix.Openat2": true,
	"unix.Readlink": true, "unix.Readlinkat": true, "unix.Stat": true, "unix.Lstat": true, "syscall.Open": true,
	"syscall.Openat": true, "syscall.Readlink": true, "syscall.Stat": true, "syscall.Lstat": true,
	// host's own path readers, called by name from inside the package.
	"ReadString": true, "ReadInt": true, "ReadHex": true, "LinkBase": true, "Exists": true, "ReadHostFile": true,
	"readAttr": true, "readHexAttr": true, "readIntAttr": true, "openHostFile": true, "openat": true,
	"openatJoin": true, "readlinkat": true, "readlinkatJoin": true, "readAttrAt": true, "readAttrRaw": true,
	"readAttrInto": true, "ReadFileLimit": true, "ReadRegularFileLimit": true,
}

// treePrimitives are host's files that implement the reads (resolving inside the root, or
// reading the real root's paths as they are), and the reads elsewhere that are not of the host
// tree or that refuse a link out themselves, each with why.
var treePrimitives = map[string]string{
	"treeread.go": "Root's readers: inside the root under a tree, the paths as they are on /",
	"devdir.go":   "devDir's readers, relative to a descriptor opened inside the root",
	"fastread.go": "the bare reads the two above call",
	"inroot.go":   "OpenInRoot and CheckInside themselves",
	"root.go":     "NewRoot and CheckTree, which judge the root's top directories and their links",
	"statefile.go": "Root.OpenFile and friends (inside the root); ReadRegularFileLimit reads a file a " +
		"user names",
	"healthstate.go os.Lstat": "whether the state directory exists at all; Root.CheckInside then refuses a link out",
	"names.go os.Open":        "ReadFileLimit reads a file a user names (a spec, a layout)",
	"writer.go os.Open":       "SyncDir opens a directory vgpu-host just wrote to, for fsync",
	"sysfswrite.go unix.Open": "the write on the real root (a tree's goes through Root.openIn)",
	"holders.go readlinkat":   "a /proc/PID/fd link read relative to its directory, opened inside the root; the link is read, never followed",
}

// rawReads returns the raw reads (rawHostReaders) of one of host's files that treePrimitives
// does not allow, as "file:line call in func".
func rawReads(fset *token.FileSet, name string, f *ast.File) []string {
	if _, ok := treePrimitives[name]; ok {
		return nil
	}
	var out []string
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			c := callName(call)
			if id, ok := call.Fun.(*ast.Ident); ok {
				c = id.Name
			}
			if _, allowed := treePrimitives[name+" "+c]; rawHostReaders[c] && !allowed {
				out = append(out, fset.Position(call.Pos()).String()+" "+c+" in "+fd.Name.Name)
			}
			return true
		})
	}
	return out
}

// TestHostReadsStayInRoot fails when a file of package host reads a path with a call that
// resolves it from "/" (os.ReadDir, os.Stat, os.Readlink, host's ReadString or readAttr of a
// path, ...) instead of through Root's readers, which under a --host-root resolve every path
// inside it: a snapshot with an absolute link (sys/bus/pci/devices/ADDR -> /sys/devices/...)
// showed this machine's device under the snapshot's name through the former.
func TestHostReadsStayInRoot(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var bad []string
	n := 0
	// host's own files: not the module's other packages, nor host's subpackages.
	parseSources(t, root, fset, func(rel string) bool { return rel != "." && rel != "host" }, func(rel string, f *ast.File) {
		if filepath.Dir(rel) == "host" {
			n++
			bad = append(bad, rawReads(fset, filepath.Base(rel), f)...)
		}
	})
	if n < 20 {
		t.Fatalf("found only %d of package host's files under %s", n, root)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("reads the host tree without resolving inside the root (use Root's readers, host/treeread.go): %s", b)
	}
}

// TestRawReadsFound: the checker finds raw reads by package function and by host's own
// readers, passes Root's methods, and honours the allowances.
func TestRawReadsFound(t *testing.T) {
	t.Parallel()
	src := `package host
func a(r Root) { os.ReadDir(r.Sys("class")) }
func b(r Root) { ReadString(r.Proc("cmdline")) }
func c(r Root) { readAttr(r.PCIDevice(x, "vendor")) }
func d(r Root) { r.readAttr(r.PCIDevice(x, "vendor")); r.ReadHostFile(r.Proc("cpuinfo"), 0); r.readDir(r.Sys("class")) }
func e(r Root) { unix.Openat(fd, "x", 0, 0) }
func f(r Root) { os.Lstat(r.StateDir("health")) }
`
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var funcs []string
	for _, v := range rawReads(fset, "p.go", file) {
		funcs = append(funcs, v[strings.LastIndex(v, " ")+1:])
	}
	if got := strings.Join(funcs, ","); got != "a,b,c,e,f" {
		t.Errorf("found %v, want a,b,c,e,f", funcs)
	}
	if got := rawReads(fset, "healthstate.go", file); len(got) != 4 {
		t.Errorf("healthstate.go's allowance: %v, want a, b, c and e alone", got)
	}
	if got := rawReads(fset, "treeread.go", file); len(got) != 0 {
		t.Errorf("a primitive's file: %v, want none", got)
	}
}
