package domains

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

const hostileBase = `apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: h
spec:
  vcpus: 2
  memory: 1GiB
  disks:
    - name: root
      path: /var/lib/libvirt/images/h.qcow2
`

// TestFloatsForIntegersRefused: yaml.v3 decoded `vcpus: 1.5` as 1 (and 1e1 as 10) without a
// word. A float where an integer is meant is now an error naming the line and the field.
func TestFloatsForIntegersRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ from, to, field string }{
		{"vcpus: 2", "vcpus: 1.5", "spec.vcpus"},
		{"vcpus: 2", "vcpus: 2.0", "spec.vcpus"},
		{"vcpus: 2", "vcpus: 1e1", "spec.vcpus"},
		{"  disks:", "  gpus:\n    - virtioGpu: {heads: 1.5}\n  disks:", "spec.gpus[0].virtioGpu.heads"},
		{"  disks:", "  gpus:\n    - passthrough: {vendor: \"10de\", count: 0.5}\n  disks:", "spec.gpus[0].passthrough.count"},
	} {
		y := strings.Replace(hostileBase, c.from, c.to, 1)
		_, err := Parse([]byte(y))
		if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "not a whole number") {
			t.Errorf("%s: %v", c.to, err)
		}
	}
	vm, err := Parse([]byte(strings.Replace(hostileBase, "vcpus: 2", "vcpus: 0x4", 1)))
	if err != nil || vm.Spec.VCPUs != 4 {
		t.Errorf("an integer in hex: %v", err)
	}
}

// TestHugeSpecRefusedCheaply: a 64 MiB spec made the process grow to ~577 MB. It is now refused
// before parsing, naming the limit, and reading it allocates little more than the limit. Not
// parallel: runtime.MemStats counts the whole process, so a parallel test's allocations would
// count as this read's (CI saw "allocated 8 MiB" that way).
func TestHugeSpecRefusedCheaply(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(hostileBase + "  # "); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Load(p)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, host.ErrInvalid) || !errors.Is(err, host.ErrTooLarge) || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("64 MiB spec: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("refusing a 64 MiB spec allocated %d MiB", grew>>20)
	}
	if _, err := Parse(make([]byte, host.MaxSpecSize+1)); !errors.Is(err, host.ErrTooLarge) {
		t.Errorf("Parse of a too-large document: %v", err)
	}
}

// TestDuplicateDiskPathsRefused: two disks on one file were caught only when spelled the same;
// "/a//b" and "/a/./b" slipped through, and so did an overlay written over another disk's base
// image.
func TestDuplicateDiskPathsRefused(t *testing.T) {
	t.Parallel()
	for _, disks := range []string{
		"    - name: a\n      path: /data/x.img\n    - name: b\n      path: /data//x.img\n",
		"    - name: a\n      path: /data/x.img\n    - name: b\n      path: /data/./x.img\n",
		"    - name: a\n      path: /data/base.qcow2\n    - name: b\n      image: /data/base.qcow2\n      size: 10GiB\n",
		"    - name: a\n      image: /data/base.qcow2\n      size: 10GiB\n    - name: b\n      image: /data/other.qcow2\n      overlay: /data/base.qcow2\n      size: 10GiB\n",
	} {
		y := hostileBase[:strings.Index(hostileBase, "    - name: root")] + disks
		vm, err := Parse([]byte(y))
		if err != nil {
			t.Fatalf("parse: %v\n%s", err, y)
		}
		if err := vm.Validate(); err == nil || !strings.Contains(err.Error(), "spec.disks[") {
			t.Errorf("accepted:\n%s(%v)", disks, err)
		}
	}
	// Two overlays on one base image are fine: the base is only read.
	y := hostileBase[:strings.Index(hostileBase, "    - name: root")] +
		"    - name: a\n      image: /data/base.qcow2\n      size: 10GiB\n    - name: b\n      image: /data/base.qcow2\n      size: 10GiB\n"
	vm, err := Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Validate(); err != nil {
		t.Errorf("two overlays of one base: %v", err)
	}
}
