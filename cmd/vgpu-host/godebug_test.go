package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// heapProbe is a program that prints the VmFlags of the mapping its heap is in
// (/proc/self/smaps), or "no mapping".
const heapProbe = `package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

var sink *[4096]byte

func main() {
	sink = new([4096]byte) // on the heap: it escapes to a global
	p := uint64(uintptr(unsafe.Pointer(sink)))
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	s := bufio.NewScanner(f)
	in := false
	for s.Scan() {
		line := s.Text()
		if lo, hi, ok := strings.Cut(strings.Fields(line)[0], "-"); ok && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && a <= p && p < b
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			fmt.Println(line)
			return
		}
	}
	fmt.Println("no mapping")
}
`

// TestGodebugDefaultNoHugePages builds a probe with cmd/vgpu-host/godebug.default linked in as
// `make build-static` links it into bin/vgpu-host, and without: with it, the heap's mapping is
// advised no huge pages (VmFlags "nh", MADV_NOHUGEPAGE), so a host whose transparent huge pages
// are "always" does not zero 2 MB for each region a short run touches (#32); without it, it is
// not. scripts/test-install.sh checks that the installed binary carries the setting.
func TestGodebugDefaultNoHugePages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("transparent huge pages are Linux's")
	}
	raw, err := os.ReadFile("godebug.default")
	if err != nil {
		t.Fatal(err)
	}
	godebug := strings.TrimSpace(string(raw))
	if !strings.Contains(godebug, "disablethp=1") {
		t.Fatalf("godebug.default is %q: disablethp=1 is what bin/vgpu-host's start relies on", godebug)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(heapProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := func(build string) string {
		t.Helper()
		bin := filepath.Join(dir, "probe-"+build)
		args := []string{"build", "-trimpath", "-o", bin}
		if build == "with" {
			args = append(args, "-ldflags", "-X runtime.godebugDefault="+godebug)
		}
		cmd := exec.Command(testenv.GoTool(), append(args, ".")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		run := exec.Command(bin)
		run.Env = withoutGODEBUG(os.Environ())
		out, err := run.Output()
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		line := strings.TrimSpace(string(out))
		if !strings.HasPrefix(line, "VmFlags:") {
			t.Fatalf("probe built %s the setting: %s (no /proc/self/smaps VmFlags for its heap)", build, line)
		}
		return line
	}
	hasNH := func(vmflags string) bool { return strings.Contains(" "+vmflags+" ", " nh ") }
	if with := flags("with"); !hasNH(with) {
		t.Errorf("with -X runtime.godebugDefault=%s the heap's mapping is not advised no huge pages: %s", godebug, with)
	}
	if without := flags("without"); hasNH(without) {
		t.Errorf("without the setting the heap's mapping is advised no huge pages too (%s): the probe proves nothing", without)
	}
}

// withoutGODEBUG is env without GODEBUG, which would override the linked-in default.
func withoutGODEBUG(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "GODEBUG=") {
			out = append(out, e)
		}
	}
	return out
}
