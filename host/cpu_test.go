package host_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

func TestParseFormatCPUList(t *testing.T) {
	t.Parallel()
	got, err := host.ParseCPUList("8-10,0,12\n")
	if err != nil || !reflect.DeepEqual(got, []int{0, 8, 9, 10, 12}) {
		t.Fatalf("ParseCPUList = %v, %v", got, err)
	}
	if s := host.FormatCPUList(got); s != "0,8-10,12" {
		t.Errorf("FormatCPUList = %q", s)
	}
	for _, bad := range []string{"a", "3-1", "1,,2", "-1"} {
		if _, err := host.ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
}

func TestThreadSiblings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for cpu, sib := range map[string]string{"cpu0": "0,2", "cpu1": "1,3", "cpu2": "0,2", "cpu3": "1,3"} {
		d := filepath.Join(dir, "sys/devices/system/cpu", cpu, "topology")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "thread_siblings_list"), []byte(sib+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// cpufreq is not a CPU; cpu4 is offline (no topology).
	_ = os.MkdirAll(filepath.Join(dir, "sys/devices/system/cpu/cpufreq"), 0o755)
	_ = os.MkdirAll(filepath.Join(dir, "sys/devices/system/cpu/cpu4"), 0o755)
	root, err := host.NewRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := host.ThreadSiblings(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]int{0: {0, 2}, 1: {1, 3}, 2: {0, 2}, 3: {1, 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ThreadSiblings = %v, want %v", got, want)
	}
}

func TestPhysAddrBits(t *testing.T) {
	t.Parallel()
	root, err := host.NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := host.PhysAddrBits(root); got != 0 {
		t.Fatalf("no cpuinfo: %d", got)
	}
	if err := os.MkdirAll(root.Proc(), 0o755); err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]uint{
		"processor\t: 0\naddress sizes\t: 46 bits physical, 57 bits virtual\npower management:\n": 46,
		"address sizes\t: 39 bits physical, 48 bits virtual\n":                                    39,
		"processor\t: 0\nflags\t: fpu\n":                                                          0,
		"address sizes\t: lots\n":                                                                 0,
	} {
		if err := os.WriteFile(root.Proc("cpuinfo"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := host.PhysAddrBits(root); got != want {
			t.Errorf("%q: %d, want %d", text, got, want)
		}
	}
}
