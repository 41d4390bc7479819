package domains

import (
	"fmt"
	"math/bits"

	"libvirt.org/go/libvirtxml"
)

// QEMUDefaultPhysBits is the guest physical address width QEMU gives an x86-64 guest when
// nothing sets it (TCG, and KVM without host-phys-bits): 40 bits, 1 TiB.
const QEMUDefaultPhysBits = 40

// MMIOFit is plan's prediction of whether the guest firmware's 64-bit PCI MMIO window holds the
// 64-bit BARs the domain's devices bring (passed-through functions, ivshmem).
//
// The model, measured on Debian 12's OVMF (2022.11) booting the lab kernel under QEMU (the
// real-libvirtd test TestLargeBARPrediction re-measures it): OVMF sizes its window itself as
// an eighth of the guest's physical address space, at its top: [2^b - 2^(b-3), 2^b), b the
// guest's phys-bits (at most OVMFMaxPhysBits). QEMU's pci-hole64-size (<pcihole64>) does not
// change it; the guest's phys-bits do: <maxphysaddr mode='emulate' bits='N'/> (any
// accelerator, TCG included, at most the host's bits under KVM) or mode='passthrough' (KVM:
// the host's bits). SeaBIOS is not modelled.
type MMIOFit struct {
	// NeedBytes is the sum of the 64-bit BARs, each a power of two.
	NeedBytes uint64 `json:"need_bytes"`
	// PhysBits is the guest's physical address width, and BitsFrom where it comes from.
	PhysBits uint   `json:"phys_bits,omitempty"`
	BitsFrom string `json:"bits_from"`
	// WindowBytes is the firmware's 64-bit window (0 when not predicted).
	WindowBytes uint64 `json:"window_bytes,omitempty"`
	// Fits is the prediction; Reason says why, with the fix when it does not fit.
	Fits   bool   `json:"fits"`
	Reason string `json:"reason"`
}

// PredictMMIO predicts the 64-bit window of the built domain d for alloc's BARs and d's
// ivshmem devices; hostBits is the host's physical address width (host.PhysAddrBits; 0 when
// unknown). It returns nil when the domain has no 64-bit BAR worth predicting (none above the
// 32-bit window's size).
func PredictMMIO(alloc *Allocation, d *libvirtxml.Domain, hostBits uint) *MMIOFit {
	var need, largest uint64
	for _, g := range alloc.GPUs {
		for _, s := range g.Slots {
			need += s.BAR64
			largest = max(largest, s.BAR64Max)
		}
	}
	if d.Devices != nil {
		for _, sh := range d.Devices.Shmems {
			need += shmemBytes(sh)
			largest = max(largest, shmemBytes(sh))
		}
	}
	if need < 1<<30 { // the 32-bit window and any firmware take these
		return nil
	}
	f := &MMIOFit{NeedBytes: need}
	if d.OS != nil && d.OS.Firmware != "efi" && (d.OS.Loader == nil || d.OS.Loader.Type != "pflash") {
		f.BitsFrom, f.Fits = "SeaBIOS", true
		f.Reason = "not predicted for BIOS firmware (SeaBIOS); use firmware: uefi for BARs this large"
		return f
	}
	kvm := d.Type == "kvm"
	var mpa *libvirtxml.DomainCPUMaxPhysAddr
	if d.CPU != nil {
		mpa = d.CPU.MaxPhysAddr
	}
	switch {
	case mpa != nil && mpa.Mode == "emulate" && mpa.Bits > 0:
		f.PhysBits, f.BitsFrom = mpa.Bits, fmt.Sprintf("maxphysaddr emulate bits=%d", mpa.Bits)
		if kvm && hostBits > 0 && mpa.Bits > hostBits {
			f.Reason = fmt.Sprintf("KVM cannot give the guest %d physical address bits: the host CPU has %d", mpa.Bits, hostBits)
			return f
		}
	case mpa != nil && mpa.Mode == "passthrough":
		if hostBits == 0 {
			f.BitsFrom, f.Fits = "maxphysaddr passthrough (host bits unknown)", true
			f.Reason = "not predicted: the host's physical address width is unknown (/proc/cpuinfo has no address sizes)"
			return f
		}
		f.PhysBits, f.BitsFrom = hostBits, fmt.Sprintf("maxphysaddr passthrough (the host's %d bits)", hostBits)
	default:
		f.PhysBits, f.BitsFrom = QEMUDefaultPhysBits, fmt.Sprintf("QEMU's default (%d bits)", QEMUDefaultPhysBits)
	}
	b := min(f.PhysBits, OVMFMaxPhysBits)
	f.WindowBytes = 1 << (b - 3)
	start := uint64(1)<<b - f.WindowBytes
	ram := domainRAM(d) + 4<<30 // RAM above 4 GiB sits below the 32-bit hole's end, roughly
	switch {
	case WindowFor(need, largest) > f.WindowBytes:
		f.Reason = fmt.Sprintf("the BARs need %s (the largest %s) but a guest with %d physical address bits gets a %s window from OVMF; %s",
			gib(need), gib(largest), b, gib(f.WindowBytes), fixFor(WindowFor(need, largest), kvm, hostBits))
	case ram > start:
		f.Reason = fmt.Sprintf("the %s window at %s overlaps the guest's RAM; give the guest more physical address bits", gib(f.WindowBytes), gib(start))
	default:
		f.Fits = true
		f.Reason = fmt.Sprintf("the BARs need %s; OVMF's window with %d physical address bits is %s", gib(need), b, gib(f.WindowBytes))
	}
	return f
}

// WindowFor is the smallest 64-bit window (a power of two) that holds BARs summing to sum
// whose largest is largest: all of them, with the largest in at most half of it. The half is
// measured, not folklore: behind libvirt's PCIe root ports a BAR as large as OVMF's whole
// window is not assigned ("can't claim; no compatible bridge window"), since the other root
// ports' windows need room too; with twice the room it is (TestLargeBARPrediction).
func WindowFor(sum, largest uint64) uint64 {
	return max(nextPow2(sum), 2*nextPow2(largest))
}

// fixFor says how to give the guest a window of win bytes.
func fixFor(win uint64, kvm bool, hostBits uint) string {
	want := uint(bits.Len64(win-1)) + 3
	switch {
	case want > OVMFMaxPhysBits:
		return fmt.Sprintf("OVMF uses at most %d bits (a %s window)", OVMFMaxPhysBits, gib(1<<(OVMFMaxPhysBits-3)))
	case kvm && hostBits > 0 && want > hostBits:
		return fmt.Sprintf("that needs %d bits and the host CPU has %d: this host cannot map them", want, hostBits)
	}
	return fmt.Sprintf("set mmio64: auto (or a size) so the guest gets %d bits (<maxphysaddr>)", want)
}

func shmemBytes(sh libvirtxml.DomainShmem) uint64 {
	if sh.Size == nil {
		return 4 << 20 // libvirt's default ivshmem size
	}
	return uint64(sh.Size.Value) * unitBytes(sh.Size.Unit, 1<<20)
}

func domainRAM(d *libvirtxml.Domain) uint64 {
	if d.Memory == nil {
		return 0
	}
	return uint64(d.Memory.Value) * unitBytes(d.Memory.Unit, 1<<10)
}

// unitBytes is one of libvirt's size units in bytes (its "Memory Allocation" units); def for
// no unit, which means MiB for a shmem size and KiB for memory.
func unitBytes(unit string, def uint64) uint64 {
	switch unit {
	case "":
		return def
	case "b", "bytes":
		return 1
	case "KB":
		return 1000
	case "k", "K", "KiB":
		return 1 << 10
	case "MB":
		return 1000 * 1000
	case "M", "MiB":
		return 1 << 20
	case "GB":
		return 1000 * 1000 * 1000
	case "G", "GiB":
		return 1 << 30
	case "TB":
		return 1000 * 1000 * 1000 * 1000
	case "T", "TiB":
		return 1 << 40
	}
	return def
}

func gib(n uint64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
