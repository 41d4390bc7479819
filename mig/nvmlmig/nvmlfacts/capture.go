package nvmlfacts

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Capture asks an initialised NVML everything a capture records, changing nothing: per GPU
// its identity, memory, MIG mode, the vGPU facts and, for every GPU-instance profile index,
// GetGpuInstanceProfileInfo, GetGpuInstancePossiblePlacements and
// GetGpuInstanceRemainingCapacity — the calls ../shared/fixtures/nvidia-h200/nvml-facts.json
// was taken with. Only reads: no MIG mode change, no instance, no reset. UUIDs are zeroed
// (ZeroUUID), so a capture can be attached to a bug report.
func Capture(lib nvml.Interface) (*Facts, error) {
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml driver version: %s", retString(ret))
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %s", retString(ret))
	}
	f := &Facts{Driver: driver, ProfileCount: nvml.GPU_INSTANCE_PROFILE_COUNT, GPUs: []GPU{}}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d: %s", i, retString(ret))
		}
		g, err := captureGPU(i, d)
		if err != nil {
			return nil, fmt.Errorf("nvml device %d: %w", i, err)
		}
		f.GPUs = append(f.GPUs, g)
	}
	return f, nil
}

// captureGPU records one device. Identity and memory are required (the replay needs them);
// everything else is recorded with its return code, whatever it is.
func captureGPU(index int, d nvml.Device) (GPU, error) {
	g := GPU{Index: index}
	var ret nvml.Return
	if g.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("name: %s", retString(ret))
	}
	uuid, _ := d.GetUUID()
	g.UUID = ZeroUUID(uuid)
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("pci info: %s", retString(ret))
	}
	g.PCIBusID = busID(pci)
	g.PCIDeviceID, g.PCISubsystemID = pci.PciDeviceId, pci.PciSubSystemId
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("memory info: %s", retString(ret))
	}
	g.MemoryTotal = mem.Total
	arch, ret := d.GetArchitecture()
	g.Architecture = fmt.Sprint(arch)
	if ret != nvml.SUCCESS {
		g.Architecture = fmt.Sprintf("%d (%s)", arch, retString(ret))
	}
	vm, ret := d.GetVirtualizationMode()
	g.VirtualizationMode = fmt.Sprintf("%d (%s)", vm, retString(ret))
	hm, ret := d.GetHostVgpuMode()
	g.HostVGPUMode = fmt.Sprintf("%d (%s)", hm, retString(ret))
	var mret nvml.Return
	g.MigCurrent, g.MigPending, mret = d.GetMigMode()
	g.MigRet = retString(mret)
	types, ret := d.GetSupportedVgpus()
	g.SupportedVGPUs = fmt.Sprintf("%d types (%s)", len(types), retString(ret))
	for i := 0; i < nvml.GPU_INSTANCE_PROFILE_COUNT; i++ {
		g.Profiles = append(g.Profiles, captureProfile(d, i))
	}
	return g, nil
}

func captureProfile(d nvml.Device, index int) Profile {
	info, ret := d.GetGpuInstanceProfileInfo(index)
	p := Profile{Index: index, Ret: retString(ret)}
	if ret != nvml.SUCCESS {
		return p
	}
	p.Info = &info
	pls, ret := d.GetGpuInstancePossiblePlacements(&info)
	p.RetPlacements = retString(ret)
	if ret == nvml.SUCCESS {
		p.Placements = pls
	}
	if n, ret := d.GetGpuInstanceRemainingCapacity(&info); ret == nvml.SUCCESS {
		p.RemainingCapacity = n
	}
	return p
}

// retString is an NVML return code as the driver's error string prints it ("Success", "Not
// Supported"), also where go-nvml has no library to ask and prints its constant's name
// ("ERROR_NOT_SUPPORTED"): then the name is spelled as the driver spells most of them. Load
// reads either form.
func retString(r nvml.Return) string {
	s := r.Error()
	name, ok := strings.CutPrefix(s, "ERROR_")
	if !ok && s != "SUCCESS" {
		return s
	}
	if !ok {
		name = s
	}
	words := strings.Split(strings.ToLower(name), "_")
	for i, w := range words {
		words[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(words, " ")
}

// busID is NVML's bus id ("00000000:00:06.0"), up to its NUL.
func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// ZeroUUID keeps a UUID's form and zeroes its hex digits: "GPU-5f3c…" becomes
// "GPU-00000000-0000-0000-0000-000000000000". A leading word of letters (GPU, MIG) stays.
func ZeroUUID(s string) string {
	prefix, rest, ok := strings.Cut(s, "-")
	if !ok || strings.IndexFunc(prefix, func(r rune) bool { return !unicode.IsLetter(r) }) >= 0 ||
		strings.IndexFunc(prefix, func(r rune) bool { return !strings.ContainsRune("abcdefABCDEF", r) }) < 0 {
		prefix, rest = "", s
	} else {
		prefix += "-"
	}
	return prefix + strings.Map(func(r rune) rune {
		if strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return '0'
		}
		return r
	}, rest)
}
