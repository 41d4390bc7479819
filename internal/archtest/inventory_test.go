package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// inventoryCallers are the shells issue 28 names, each of which reads the host's inventory
// through the one typed operation (ops.Inventory, or its request run by ops.Run): the CLI's
// command tree, the agent's endpoints, the device plugin and the DRA driver.
var inventoryCallers = []string{"internal/clitree", "agent", "kube/deviceplugin", "kube/dra"}

// scanExceptions are the packages that name host.Scan although they could call ops (ops does
// not import them), each with why. The list may only shrink: an entry no package needs fails.
var scanExceptions = map[string]string{}

// hostPath and opsPath are the import paths of packages host and ops.
const (
	hostPath = modulePath + "host"
	opsPath  = modulePath + "ops"
)

// moduleImports returns, for each package directory of pkgs, the module's packages (as
// directories relative to the module root) its files import.
func moduleImports(pkgs map[string][]*ast.File) map[string][]string {
	out := map[string][]string{}
	for dir, files := range pkgs {
		seen := map[string]bool{}
		for _, f := range files {
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if dep, ok := strings.CutPrefix(p, modulePath); ok && !seen[dep] {
					seen[dep] = true
					out[dir] = append(out[dir], dep)
				}
			}
		}
	}
	return out
}

// reachable is from and every package it imports, directly or not.
func reachable(g map[string][]string, from string) map[string]bool {
	out := map[string]bool{from: true}
	todo := []string{from}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, d := range g[p] {
			if !out[d] {
				out[d] = true
				todo = append(todo, d)
			}
		}
	}
	return out
}

// refsTo returns where f names one of names of the package at importPath (a call or the
// function taken as a value), through whatever name f imports it by, as "FILE:LINE:COL pkg.Name".
// A file that does not import the package names none of it, whatever its identifiers are called.
func refsTo(fset *token.FileSet, f *ast.File, importPath string, names ...string) []string {
	local := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
			local = path.Base(importPath)
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" || local == "_" || local == "." {
		return nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && want[sel.Sel.Name] {
			out = append(out, fset.Position(sel.Pos()).String()+" "+path.Base(importPath)+"."+sel.Sel.Name)
		}
		return true
	})
	return out
}

// scanViolation is a package that names host.Scan where it should call ops.Inventory.
type scanViolation struct {
	dir, where string
}

// scanViolations finds the places a package of pkgs (by directory) names host.Scan although it
// could call ops.Inventory: every package but host itself, ops, and the packages ops imports
// (directly or not), which cannot call it back. host's own tests and tools are _test files,
// which pkgs does not hold.
func scanViolations(fset *token.FileSet, pkgs map[string][]*ast.File) []scanViolation {
	below := reachable(moduleImports(pkgs), "ops")
	var out []scanViolation
	for dir, files := range pkgs {
		if below[dir] || dir == "host" {
			continue
		}
		for _, f := range files {
			for _, w := range refsTo(fset, f, hostPath, "Scan") {
				out = append(out, scanViolation{dir: dir, where: w})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

// callsInventoryOp reports whether files name ops.Inventory or its request (run by ops.Run).
func callsInventoryOp(fset *token.FileSet, files []*ast.File) bool {
	for _, f := range files {
		if len(refsTo(fset, f, opsPath, "Inventory", "InventoryRequest")) > 0 {
			return true
		}
	}
	return false
}

// TestInventoryThroughOps: the CLI, the agent's endpoints, the device plugin and the DRA driver
// read the inventory through the one typed operation, ops.Inventory (issue 28), and no package
// that could call it reads the host's inventory with host.Scan beside it: only host, ops and
// the layers ops itself uses (layout, lifecycle: ops imports them, so they cannot call it) name
// host.Scan, and scanExceptions the packages left, each with why.
func TestInventoryThroughOps(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	parseSources(t, root, fset, func(rel string) bool { return rel == "third_party" }, func(rel string, f *ast.File) {
		pkgs[filepath.Dir(rel)] = append(pkgs[filepath.Dir(rel)], f)
	})
	for _, p := range append([]string{"host", "ops"}, inventoryCallers...) {
		if len(pkgs[p]) == 0 {
			t.Fatalf("found no Go files of package %s under %s: the check looks at the wrong tree", p, root)
		}
	}
	used := map[string]bool{}
	for _, v := range scanViolations(fset, pkgs) {
		if _, ok := scanExceptions[v.dir]; ok {
			used[v.dir] = true
			continue
		}
		t.Errorf("%s reads the inventory with host.Scan: call ops.Inventory (ops.InventoryRequest{HostOnly: true} for the host alone): %s", v.dir, strings.TrimPrefix(v.where, root+"/"))
	}
	for dir, why := range scanExceptions {
		if !used[dir] {
			t.Errorf("scanExceptions lists %s (%s), which names host.Scan no more: drop it", dir, why)
		}
	}
	for _, p := range inventoryCallers {
		if !callsInventoryOp(fset, pkgs[p]) {
			t.Errorf("%s does not read the inventory through ops.Inventory (or ops.InventoryRequest run by ops.Run)", p)
		}
	}
}

// TestInventoryRuleFound: the rule finds host.Scan called or taken as a value, through the
// package's own name or another one, in a package above ops; and passes ops, the packages ops
// imports (directly or through another), another package's Scan, a Scan method, and a file
// that does not import host. The positive check sees ops.Inventory and ops.InventoryRequest
// through any import name, and nothing else of ops.
func TestInventoryRuleFound(t *testing.T) {
	t.Parallel()
	const host, ops = `"github.com/vgpu-host/vgpu-host/host"`, `"github.com/vgpu-host/vgpu-host/ops"`
	srcs := map[string]string{
		"kube/deviceplugin/a.go": `package deviceplugin
import "github.com/vgpu-host/vgpu-host/host"
func sync(r host.Root) { inv, _ := host.Scan(r); _ = inv }`,
		"cmd/tool/main.go": `package main
import h ` + host + `
var _ = 0
func main() { scan := h.Scan; scan(h.Root{}) }`,
		"ops/inspect.go": `package ops
import ("github.com/vgpu-host/vgpu-host/host"; "github.com/vgpu-host/vgpu-host/layout")
func Inventory(r host.Root) { host.Scan(r); layout.X() }`,
		"layout/show.go": `package layout
import ("github.com/vgpu-host/vgpu-host/host"; "github.com/vgpu-host/vgpu-host/lifecycle")
func X(r host.Root) { host.Scan(r); lifecycle.Y() }`,
		"lifecycle/plan.go": `package lifecycle
import "github.com/vgpu-host/vgpu-host/host"
func Y() { o.Scan = host.Scan }`,
		"agent/api.go": `package agent
import ("bufio"; "github.com/vgpu-host/vgpu-host/host"; other "github.com/vgpu-host/vgpu-host/mdev"; o ` + ops + `)
func serve(sc *bufio.Scanner, d host.Device) { sc.Scan(); other.Scan(); d.Scan(); _ = &o.InventoryRequest{} }`,
		"kube/dra/dra.go": `package dra
import ("github.com/vgpu-host/vgpu-host/ops")
func scan() { host.Scan(root); ops.Inventory(ctx, env, req) }`,
		"internal/clitree/x.go": `package clitree
import ops ` + ops + `
func x() { ops.Run(); ops.Check() }`,
	}
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	names := make([]string, 0, len(srcs))
	for name := range srcs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, srcs[name], 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pkgs[filepath.Dir(name)] = append(pkgs[filepath.Dir(name)], f)
	}
	var got []string
	for _, v := range scanViolations(fset, pkgs) {
		got = append(got, v.dir+" "+v.where)
	}
	want := []string{"cmd/tool cmd/tool/main.go:4:23 host.Scan", "kube/deviceplugin kube/deviceplugin/a.go:3:36 host.Scan"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var calls []string
	for _, p := range []string{"agent", "kube/dra", "internal/clitree", "kube/deviceplugin"} {
		if callsInventoryOp(fset, pkgs[p]) {
			calls = append(calls, p)
		}
	}
	if want := "agent kube/dra"; strings.Join(calls, " ") != want {
		t.Errorf("callers of ops.Inventory found: %v, want %s", calls, want)
	}
}
