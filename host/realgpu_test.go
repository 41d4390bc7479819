package host_test

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// realGPUHosts are the real NVIDIA hosts captured read-only (hosttest.Capture): the H200 of
// ../shared/fixtures and the H100 of testdata/nvidia-h100, each with its sysfs and what
// nvidia-smi -q printed on the same machine at the same time.
var realGPUHosts = []string{"nvidia-h200", "nvidia-h100"}

// smiQ reads the fields of nvidia-smi -q's first GPU that sysfs also holds.
func smiQ(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	field := regexp.MustCompile(`^(\s*)(Bus Id|Device Id|Sub System Id|Product Name|Total)\s+: (\S+)`)
	out := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) != "" && !strings.Contains(line, ":") {
			section = strings.TrimSpace(line)
		}
		m := field.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key := m[2]
		if key == "Total" {
			key = section + " Total" // "BAR1 Memory Usage Total", "FB Memory Usage Total", …
		}
		if _, seen := out[key]; !seen {
			out[key] = m[3]
		}
	}
	return out
}

// Scan of a real GPU host's sysfs agrees with what NVIDIA's own tool printed on that host: the
// GPU's address, its vendor, device and subsystem IDs, its driver, and the size of BAR1 (PCI
// BAR 2 on these GPUs), which is what decides whether a guest's firmware can map it.
func TestScanAgreesWithNvidiaSMI(t *testing.T) {
	t.Parallel()
	for _, name := range realGPUHosts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := smiQ(t, hosttest.Capture(t, name+"/nvidia-smi-q.txt"))
			for _, k := range []string{"Bus Id", "Device Id", "Sub System Id", "BAR1 Memory Usage Total"} {
				if q[k] == "" {
					t.Fatalf("nvidia-smi -q of %s has no %q: %v", name, k, q)
				}
			}
			inv, err := host.Scan(hosttest.Snapshot(t, hosttest.Capture(t, name+"/sysfs-snapshot.tar.gz")))
			if err != nil {
				t.Fatal(err)
			}
			// nvidia-smi prints the domain in 8 digits (00000000:00:06.0), sysfs in 4.
			addr := strings.ToLower(q["Bus Id"][4:])
			var gpu *host.Device
			for i := range inv.Devices {
				if inv.Devices[i].Address.String() == addr {
					gpu = &inv.Devices[i]
				}
			}
			if gpu == nil {
				t.Fatalf("no device %s in the scan of %s's sysfs", addr, name)
			}
			// Device Id 0x233010DE: device 2330, vendor 10de.
			id := strings.ToLower(strings.TrimPrefix(q["Device Id"], "0x"))
			sub := strings.ToLower(strings.TrimPrefix(q["Sub System Id"], "0x"))
			if got, want := gpu.DeviceID+gpu.VendorID, id; got != want {
				t.Errorf("%s: device+vendor %s, nvidia-smi %s", addr, got, want)
			}
			if got, want := gpu.SubsysDeviceID+gpu.SubsysVendorID, sub; got != want {
				t.Errorf("%s: subsystem %s, nvidia-smi %s", addr, got, want)
			}
			if gpu.Driver != "nvidia" || !gpu.IsGPU {
				t.Errorf("%s: driver %q, GPU %v; nvidia-smi answered through the nvidia driver", addr, gpu.Driver, gpu.IsGPU)
			}
			var bar2 uint64
			for _, b := range gpu.BARs {
				if b.Index == 2 {
					bar2 = b.Size
				}
			}
			if got, want := fmt.Sprintf("%d", bar2>>20), q["BAR1 Memory Usage Total"]; got != want {
				t.Errorf("%s: BAR 2 is %d MiB, nvidia-smi's BAR1 total %s MiB", addr, bar2>>20, want)
			}
		})
	}
}

// How a real GPU is named when pci.ids lists it and when it does not: the H200 capture's GPU
// reads "NVIDIA Corporation Device 2335" (as lspci prints it), not the vendor alone, and a
// model selector's hint names it with the IDs to select it by; the H100 has its pci.ids name
// and no hint.
func TestTitleOfRealGPUs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ host, title, hint string }{
		{"nvidia-h200", "NVIDIA Corporation Device 2335", `pci.ids names no device for 0000:00:06.0 (10de:2335), so no model matches it: select by ID (vendor: "10de", device: "2335")`},
		{"nvidia-h100", "NVIDIA Corporation GH100[H100 SXM5 80GB]", ""},
	} {
		t.Run(tc.host, func(t *testing.T) {
			t.Parallel()
			inv, err := host.Scan(hosttest.RealGPUSnapshot(t, tc.host+"/sysfs-snapshot.tar.gz"))
			if err != nil {
				t.Fatal(err)
			}
			var titles []string
			for i := range inv.Devices {
				if inv.Devices[i].IsGPU {
					titles = append(titles, inv.Devices[i].Title())
				}
			}
			if len(titles) != 1 || titles[0] != tc.title {
				t.Errorf("GPU titles %q, want [%q]", titles, tc.title)
			}
			hint := host.UnnamedGPUsHint(inv.Devices)
			if tc.hint == "" && hint != "" || !strings.HasPrefix(hint, tc.hint) {
				t.Errorf("hint %q, want it to start %q", hint, tc.hint)
			}
		})
	}
	// Without a vendor name either, the IDs.
	d := host.Device{VendorID: "10de", DeviceID: "2335"}
	if got := d.Title(); got != "10de:2335" {
		t.Errorf("no names: %q", got)
	}
}

// check on hosts that are themselves virtual machines (the hypervisor flag in /proc/cpuinfo):
// the real H200 and H100 hosts, cloud VMs with the GPU passed through and no VT-x, /dev/kvm or
// IOMMU, get fixes for a VM (nested virtualization, a virtual IOMMU, a bare-metal instance),
// not the firmware's; the real-kernel QEMU snapshot, a VM that has all of them, passes as
// before with the same first line. A bare-metal tree gets no such line and the firmware fixes.
func TestCheckInAVirtualMachine(t *testing.T) {
	t.Parallel()
	for _, name := range realGPUHosts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, err := host.Check(hosttest.Snapshot(t, hosttest.Capture(t, name+"/sysfs-snapshot.tar.gz")))
			if err != nil {
				t.Fatal(err)
			}
			c := map[string]host.CheckResult{}
			for _, x := range r.Checks {
				c[x.Name] = x
			}
			if r.Checks[0].Name != "virtual-machine" || r.Checks[0].Verdict != host.VerdictOK || !strings.Contains(r.Checks[0].Detail, "hypervisor flag") {
				t.Errorf("first check %+v, want the virtual-machine line", r.Checks[0])
			}
			for check, want := range map[string]string{
				"cpu-virtualization":  "turn on nested virtualization for it in the hypervisor that runs it (KVM there: the kvm_intel module option nested=1",
				"kvm":                 "modprobe kvm_intel once this virtual machine has VT-x (see cpu-virtualization)",
				"iommu":               "the hypervisor that runs it must give it a virtual IOMMU (libvirt: <iommu model='intel'>",
				"interrupt-remapping": "its virtual IOMMU must remap interrupts",
			} {
				if check == "kvm" && c[check].Verdict != host.VerdictFail {
					// The H100 host had a /dev/kvm without VT-x (so had the live H200's):
					// a warning, not an ok.
					if c[check].Verdict != host.VerdictWarn || !strings.Contains(c[check].Detail, "but the CPU shows no VT-x (vmx): KVM may not be able to run guests") {
						t.Errorf("kvm: %+v, want a warning that the CPU shows no VT-x", c[check])
					}
					continue
				}
				if !strings.Contains(c[check].Fix, want) || strings.Contains(c[check].Fix, "firmware") {
					t.Errorf("%s: fix %q, want %q and no firmware", check, c[check].Fix, want)
				}
			}
		})
	}
	t.Run("qemu-q35-iommu", func(t *testing.T) {
		t.Parallel()
		r, err := host.Check(hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz")))
		if err != nil {
			t.Fatal(err)
		}
		if r.Checks[0].Name != "virtual-machine" || r.Checks[1].Name != "cpu-virtualization" || r.Checks[1].Verdict != host.VerdictOK {
			t.Errorf("checks %+v", r.Checks[:2])
		}
		for _, x := range r.Checks {
			if x.Name == "kvm" && (strings.Contains(x.Fix, "once this virtual machine has") || !strings.Contains(x.Fix, "modprobe kvm_amd")) {
				t.Errorf("kvm on a VM that has svm: %q", x.Fix)
			}
		}
	})
	t.Run("bare metal", func(t *testing.T) {
		t.Parallel()
		tr := hosttest.New(t)
		tr.WriteFile("proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse msr pae x2apic\n\n")
		r, err := host.Check(tr.Root)
		if err != nil {
			t.Fatal(err)
		}
		if r.Checks[0].Name != "cpu-virtualization" || !strings.Contains(r.Checks[0].Fix, "enable Intel VT-x in the firmware setup") {
			t.Errorf("first check %+v, want cpu-virtualization with the firmware fix", r.Checks[0])
		}
	})
}
