package host_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

func checks(t *testing.T, root host.Root) (*host.Readiness, map[string]host.CheckResult, map[host.Address]host.GPUReadiness) {
	t.Helper()
	r, err := host.Check(root)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]host.CheckResult{}
	for _, c := range r.Checks {
		byName[c.Name] = c
	}
	gpus := map[host.Address]host.GPUReadiness{}
	for _, g := range r.GPUs {
		gpus[g.Address] = g
	}
	return r, byName, gpus
}

func TestCheckReadyHost(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	dc := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	consumer, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
	shared, _ := tr.GPUWithNIC("0000:00:0b.0", "0000:03:01.0", "0000:03:02.0")
	tr.WriteFile("dev/dri/renderD128", "")
	r, c, g := checks(t, tr.Root)
	for _, name := range []string{"cpu-virtualization", "kvm", "iommu", "kernel-cmdline", "interrupt-remapping", "vfio", "render-node"} {
		if c[name].Verdict != host.VerdictOK {
			t.Errorf("%s = %+v, want ok", name, c[name])
		}
	}
	if !r.Assignable {
		t.Error("a host with a clean A100 group must be assignable")
	}
	if !slices.Contains(g[dc].Capabilities, host.CapPassthrough) || g[dc].Verdict != host.VerdictOK {
		t.Errorf("A100 = %+v", g[dc])
	}
	if !slices.Contains(g[consumer].Capabilities, host.CapPassthrough) {
		t.Errorf("GPU + its HDMI audio is passthrough-ready (audio moves with it): %+v", g[consumer])
	}
	if sg := g[shared]; !slices.Contains(sg.Capabilities, host.CapGroupShared) || sg.Assignable || sg.Verdict != host.VerdictWarn || !strings.Contains(sg.Detail, "0000:03:02.0") || sg.Fix == "" {
		t.Errorf("GPU sharing a group with a NIC = %+v", sg)
	}
}

func TestCheckNothingAssignable(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.NoIOMMU()
	tr.SetCmdline("root=/dev/sda1 pcie_acs_override=downstream")
	tr.WriteFile("proc/cpuinfo", "flags\t: fpu sse\n")
	tr.WriteFile("proc/interrupts", "  0: 10 IO-APIC 2-edge timer\n")
	os.Remove(filepath.Join(tr.Dir(), "dev/kvm"))
	os.RemoveAll(filepath.Join(tr.Dir(), "sys/module/vfio_pci"))
	os.RemoveAll(filepath.Join(tr.Dir(), "sys/bus/pci/drivers/vfio-pci"))
	gpu := tr.AddPCI(hosttest.PCI{Addr: "0000:00:06.0", Vendor: 0x1af4, Device: 0x1050, Class: 0x038000, Driver: "virtio-pci", Group: -1})
	r, c, g := checks(t, tr.Root)
	if r.Assignable {
		t.Error("no IOMMU, no vGPU: nothing is assignable")
	}
	for name, want := range map[string]host.Verdict{"cpu-virtualization": host.VerdictFail, "kvm": host.VerdictFail, "iommu": host.VerdictFail,
		"kernel-cmdline": host.VerdictWarn, "interrupt-remapping": host.VerdictWarn, "vfio": host.VerdictWarn, "render-node": host.VerdictWarn} {
		if c[name].Verdict != want || c[name].Fix == "" {
			t.Errorf("%s = %+v, want %s with a fix", name, c[name], want)
		}
	}
	if !strings.Contains(c["kernel-cmdline"].Detail, "pcie_acs_override") {
		t.Errorf("cmdline check does not warn about pcie_acs_override: %+v", c["kernel-cmdline"])
	}
	if g[gpu].Verdict != host.VerdictFail || !slices.Equal(g[gpu].Capabilities, []string{host.CapParavirtual}) {
		t.Errorf("virtio-gpu without IOMMU = %+v, want paravirtual-only", g[gpu])
	}
}

func TestCheckVGPUCapabilities(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	a100 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(a100)
	l40s := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 1, 2, nil)
	igpu := tr.IntelGVTg()
	_, _, g := checks(t, tr.Root)
	if !slices.Contains(g[a100].Capabilities, host.CapMdev) {
		t.Errorf("A100 = %+v, want mdev-capable", g[a100])
	}
	if caps := g[l40s].Capabilities; !slices.Contains(caps, host.CapSRIOV) || !slices.Contains(caps, host.CapVendorVGPU) || !g[l40s].Assignable {
		t.Errorf("L40S = %+v, want sriov-capable + vendor-vgpu", g[l40s])
	}
	if len(g) != 3 {
		t.Errorf("GPU lines = %d, want 3 (VFs are judged through their PF)", len(g))
	}
	// The boot VGA iGPU: a warning, mdev still offered.
	if ig := g[igpu]; !slices.Contains(ig.Capabilities, host.CapBootVGA) || !slices.Contains(ig.Capabilities, host.CapMdev) || ig.Verdict != host.VerdictWarn {
		t.Errorf("iGPU = %+v", ig)
	}
}

func TestCheckRealKernelSnapshot(t *testing.T) {
	t.Parallel()
	root := hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz"))
	r, c, g := checks(t, root)
	for name, want := range map[string]host.Verdict{"iommu": host.VerdictOK, "kernel-cmdline": host.VerdictOK, "interrupt-remapping": host.VerdictOK,
		"vfio": host.VerdictOK, "kvm": host.VerdictFail, "render-node": host.VerdictWarn} {
		if c[name].Verdict != want {
			t.Errorf("%s = %+v, want %s", name, c[name], want)
		}
	}
	if !r.Assignable || !slices.Equal(r.VirtualMdev, []string{"mbochs", "mdpy"}) {
		t.Errorf("assignable %v virtual mdev %v", r.Assignable, r.VirtualMdev)
	}
	want := map[string]string{"00:02.0": host.CapBootVGA, "01:00.0": host.CapPassthrough, "02:00.0": host.CapPassthrough, "03:01.0": host.CapGroupShared, "00:06.0": host.CapPassthrough}
	for a, capability := range want {
		if !slices.Contains(g[host.MustParseAddress(a)].Capabilities, capability) {
			t.Errorf("%s = %+v, want %s", a, g[host.MustParseAddress(a)], capability)
		}
	}
}

// amdHost turns a fresh tree into an AMD host: AuthenticAMD with svm, an AMD-Vi unit (ivhd0,
// which has no intel-iommu/ecap), no amd_iommu= on the command line (on by default).
func amdHost(t *testing.T) *hosttest.Tree {
	tr := hosttest.New(t)
	tr.WriteFile("proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu vme de pse msr pae svm x2apic\n\n")
	os.RemoveAll(filepath.Join(tr.Dir(), "sys/class/iommu"))
	os.RemoveAll(filepath.Join(tr.Dir(), "sys/devices/virtual/iommu/dmar0"))
	tr.WriteFile("sys/devices/pci0000:00/0000:00:00.2/iommu/ivhd0/amd-iommu/features", "25bf732fa2295afe\n")
	if err := os.MkdirAll(filepath.Join(tr.Dir(), "sys/class/iommu"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/pci0000:00/0000:00:00.2/iommu/ivhd0", filepath.Join(tr.Dir(), "sys/class/iommu/ivhd0")); err != nil {
		t.Fatal(err)
	}
	tr.WriteFile("proc/interrupts", "           CPU0\n  0:         10   IR-IO-APIC    2-edge      timer\n")
	tr.SetCmdline("BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 ro iommu=pt")
	return tr
}

func TestCheckAMDHost(t *testing.T) {
	t.Parallel()
	tr := amdHost(t)
	gpu, _ := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "amdgpu")
	r, c, g := checks(t, tr.Root)
	for _, name := range []string{"cpu-virtualization", "iommu", "kernel-cmdline", "interrupt-remapping"} {
		if c[name].Verdict != host.VerdictOK {
			t.Errorf("%s = %+v, want ok on an AMD host with AMD-Vi on by default", name, c[name])
		}
	}
	if !strings.Contains(c["cpu-virtualization"].Detail, "svm") || !strings.Contains(c["kernel-cmdline"].Detail, "AMD IOMMU is on by default") {
		t.Errorf("cpu %+v, cmdline %+v", c["cpu-virtualization"], c["kernel-cmdline"])
	}
	if !strings.Contains(c["interrupt-remapping"].Detail, "ivhd0") {
		t.Errorf("interrupt remapping = %+v, want the AMD-Vi unit named", c["interrupt-remapping"])
	}
	if !r.Assignable || !slices.Contains(g[gpu].Capabilities, host.CapPassthrough) {
		t.Errorf("assignable %v, GPU %+v", r.Assignable, g[gpu])
	}

	// The same AMD host without /dev/kvm and with the IOMMU switched off on the command line:
	// every fix is in AMD's words, none mentions Intel's.
	os.Remove(filepath.Join(tr.Dir(), "dev/kvm"))
	tr.NoIOMMU()
	tr.SetCmdline("root=/dev/nvme0n1p2 amd_iommu=off")
	_, c, _ = checks(t, tr.Root)
	for name, want := range map[string]string{"kvm": "kvm_amd", "iommu": "AMD-Vi", "kernel-cmdline": "remove amd_iommu=off"} {
		if !strings.Contains(c[name].Fix, want) || strings.Contains(c[name].Fix, "intel") || strings.Contains(c[name].Fix, "VT-") {
			t.Errorf("%s fix = %q, want AMD wording with %q and no Intel one", name, c[name].Fix, want)
		}
	}
	if c["kernel-cmdline"].Verdict != host.VerdictFail || c["iommu"].Verdict != host.VerdictFail {
		t.Errorf("amd_iommu=off: cmdline %+v, iommu %+v; want both fail", c["kernel-cmdline"], c["iommu"])
	}
	if !strings.Contains(c["iommu"].Fix, "remove amd_iommu=off") {
		t.Errorf("iommu fix = %q, want it to name amd_iommu=off", c["iommu"].Fix)
	}
}

func TestCheckIntelWording(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t) // GenuineIntel, vmx, dmar0
	os.Remove(filepath.Join(tr.Dir(), "dev/kvm"))
	tr.NoIOMMU()
	_, c, _ := checks(t, tr.Root)
	for name, want := range map[string]string{"kvm": "kvm_intel", "iommu": "intel_iommu=on", "kernel-cmdline": "add intel_iommu=on"} {
		if !strings.Contains(c[name].Fix, want) || strings.Contains(c[name].Fix, "amd") || strings.Contains(c[name].Fix, "AMD") {
			t.Errorf("%s fix = %q, want Intel wording with %q and no AMD one", name, c[name].Fix, want)
		}
	}
	// Booted with intel_iommu=on and still no IOMMU: the firmware has VT-d off.
	tr.SetCmdline("root=/dev/sda1 intel_iommu=on iommu=pt")
	_, c, _ = checks(t, tr.Root)
	if !strings.Contains(c["iommu"].Fix, "enable VT-d in the firmware") || c["kernel-cmdline"].Verdict != host.VerdictOK {
		t.Errorf("intel_iommu=on without DMAR: iommu %+v cmdline %+v", c["iommu"], c["kernel-cmdline"])
	}
}

func TestCheckCmdline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmdline string
		noIOMMU bool
		want    host.Verdict
		detail  string
	}{
		{"root=/dev/sda1 intel_iommu=on iommu=pt", false, host.VerdictOK, "intel_iommu=on; iommu=pt"},
		{"root=/dev/sda1 intel_iommu=on,sm_on iommu=pt", false, host.VerdictOK, "intel_iommu=on"},
		{"root=/dev/sda1 iommu=pt", false, host.VerdictOK, "the IOMMU is active (kernel default)"},
		{"root=/dev/sda1 iommu=pt", true, host.VerdictWarn, "no intel_iommu=on"},
		{"root=/dev/sda1 intel_iommu=on", false, host.VerdictWarn, "no iommu=pt"},
		{"root=/dev/sda1 intel_iommu=off iommu=pt", true, host.VerdictFail, "intel_iommu=off disables"},
		{"root=/dev/sda1 iommu=off", true, host.VerdictFail, "iommu=off disables"},
		{"root=/dev/sda1 intel_iommu=on iommu=pt pcie_acs_override=downstream,multifunction", false, host.VerdictWarn, "pcie_acs_override"},
	} {
		tr := hosttest.New(t)
		tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "nouveau")
		if tc.noIOMMU {
			tr.NoIOMMU()
		}
		tr.SetCmdline(tc.cmdline)
		_, c, _ := checks(t, tr.Root)
		got := c["kernel-cmdline"]
		if got.Verdict != tc.want || !strings.Contains(got.Detail, tc.detail) || (got.Verdict != host.VerdictOK) != (got.Fix != "") {
			t.Errorf("%q (no IOMMU %v) = %+v, want %s with %q and a fix exactly when not ok", tc.cmdline, tc.noIOMMU, got, tc.want, tc.detail)
		}
	}
}
