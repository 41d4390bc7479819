package domains

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func TestWindowFor(t *testing.T) {
	t.Parallel()
	const G = uint64(1) << 30
	for _, c := range []struct{ sum, largest, want uint64 }{
		{128*G + 32<<20, 128 * G, 256 * G}, // an A100 80GB: BAR1 128 GiB + BAR3 32 MiB
		{128 * G, 128 * G, 256 * G},        // one BAR as large as the window does not fit
		{4 * 64 * G, 64 * G, 256 * G},      // four 64 GiB BARs
		{3 * 64 * G, 64 * G, 256 * G},
		{16 * G, 16 * G, 32 * G},
	} {
		if got := WindowFor(c.sum, c.largest); got != c.want {
			t.Errorf("WindowFor(%d GiB, %d GiB) = %d GiB, want %d GiB", c.sum/G, c.largest/G, got/G, c.want/G)
		}
	}
}

// TestPredictMMIO: where the guest's physical address bits come from (emulate, passthrough
// with the host's, QEMU's default), and what refuses: too small a window, more emulated bits
// than a KVM host has, a window over RAM; SeaBIOS and unknown host bits are not predicted.
func TestPredictMMIO(t *testing.T) {
	t.Parallel()
	const G = uint64(1) << 30
	alloc := func(bar uint64) *Allocation {
		return &Allocation{GPUs: []GPUAllocation{{Slots: []Slot{{BAR64: bar, BAR64Max: bar}}}}}
	}
	dom := func(typ string, mpa *libvirtxml.DomainCPUMaxPhysAddr, fw string, ramGiB uint) *libvirtxml.Domain {
		return &libvirtxml.Domain{Type: typ, OS: &libvirtxml.DomainOS{Firmware: fw}, CPU: &libvirtxml.DomainCPU{MaxPhysAddr: mpa},
			Memory: &libvirtxml.DomainMemory{Value: ramGiB << 20, Unit: "KiB"}}
	}
	emulate := func(b uint) *libvirtxml.DomainCPUMaxPhysAddr {
		return &libvirtxml.DomainCPUMaxPhysAddr{Mode: "emulate", Bits: b}
	}
	pass := &libvirtxml.DomainCPUMaxPhysAddr{Mode: "passthrough"}
	for _, c := range []struct {
		name     string
		bar      uint64
		d        *libvirtxml.Domain
		hostBits uint
		fits     bool
		want     string
	}{
		{"small BARs", 256 << 20, dom("kvm", nil, "efi", 4), 46, true, "nil"},
		{"default bits", 128 * G, dom("qemu", nil, "efi", 4), 46, false, "gets a 128 GiB window from OVMF; set mmio64: auto (or a size) so the guest gets 41 bits"},
		{"emulated", 128 * G, dom("qemu", emulate(41), "efi", 4), 0, true, "window with 41 physical address bits is 256 GiB"},
		{"kvm emulate above host", 128 * G, dom("kvm", emulate(42), "efi", 4), 39, false, "KVM cannot give the guest 42 physical address bits: the host CPU has 39"},
		{"kvm passthrough 46", 128 * G, dom("kvm", pass, "efi", 4), 46, true, "the host's 46 bits"},
		{"kvm passthrough 39", 128 * G, dom("kvm", pass, "efi", 4), 39, false, "that needs 41 bits and the host CPU has 39: this host cannot map them"},
		{"passthrough unknown", 128 * G, dom("kvm", pass, "efi", 4), 0, true, "not predicted: the host's physical address width is unknown"},
		{"seabios", 128 * G, dom("kvm", nil, "", 4), 46, true, "not predicted for BIOS firmware"},
		{"window over RAM", 64 * G, dom("qemu", emulate(40), "efi", 1000), 0, false, "overlaps the guest's RAM"},
		{"beyond OVMF", 8 << 40, dom("kvm", pass, "efi", 4), 52, false, "OVMF uses at most 46 bits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := PredictMMIO(alloc(c.bar), c.d, c.hostBits)
			if c.want == "nil" {
				if f != nil {
					t.Fatalf("%+v, want no prediction", f)
				}
				return
			}
			if f == nil || f.Fits != c.fits || !strings.Contains(f.Reason+" "+f.BitsFrom, c.want) {
				t.Fatalf("%+v, want fits=%v and %q", f, c.fits, c.want)
			}
		})
	}
	// ivshmem devices count like BARs (Looking Glass is small; a test device is not).
	d := dom("qemu", nil, "efi", 4)
	d.Devices = &libvirtxml.DomainDeviceList{Shmems: []libvirtxml.DomainShmem{{Name: "big", Size: &libvirtxml.DomainShmemSize{Value: 256, Unit: "G"}}}}
	if f := PredictMMIO(&Allocation{}, d, 0); f == nil || f.Fits || f.NeedBytes != 256*G {
		t.Fatalf("256 GiB ivshmem: %+v", f)
	}
}
