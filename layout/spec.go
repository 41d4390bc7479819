// Package layout is the declarative host layout: one YAML file of named configurations, each
// saying what every GPU of the host is for (passed through whole, split into VFs, mdevs,
// vendor-VFIO vGPUs or MIG instances, or left to its host driver). Plan compares a
// configuration with the host as it is now and lists the exact changes, in dependency order,
// before anything is written; Apply makes only those, with an undo stack; Show prints the
// layout the host is in now as a layout file (docs/layout.md).
//
// The package reads the host only through host (Scan), mdev (instances, VFs, persistence) and
// vfio (bindings and their ledger), and changes it only through their existing verbs, so a
// layout does exactly what the imperative commands (vf enable, mdev create/define, bind) do.
package layout

import (
	"errors"
	"fmt"
	"github.com/vgpu-host/vgpu-host/internal/strictyaml"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// APIVersion and Kind identify a host layout file.
const (
	APIVersion = "vgpu-host/v1"
	Kind       = "HostLayout"
)

// Mode is what a layout entry makes of a device on the host: bind it to vfio-pci, split it
// into VFs, mdevs, vendor-VFIO vGPUs or MIG instances, or leave it to its host driver. It is
// not a vgpu.Kind, which names what a guest gets: a mode prepares devices for guests of one
// kind (GuestKind), and ModeHost prepares none. Its string is the "mode" of a layout file.
type Mode string

// Modes a GPU entry can ask for.
const (
	// ModePassthrough binds the GPU's whole IOMMU group to vfio-pci.
	ModePassthrough Mode = "passthrough"
	// ModeSRIOV enables N SR-IOV VFs on the device.
	ModeSRIOV Mode = "sriov"
	// ModeMdev creates mdev instances (type × count) on the device or virtual parent.
	ModeMdev Mode = "mdev"
	// ModeVendorVFIO enables VFs and gives them NVIDIA vGPU types (vendor-specific VFIO).
	ModeVendorVFIO Mode = "vendor-vfio"
	// ModeMIG splits an NVIDIA GPU into MIG GPU instances (through NVML), optionally with
	// MIG-backed vGPU types on its VFs.
	ModeMIG Mode = "mig"
	// ModeHost leaves the device with its host driver: not bound to vfio-pci, no VFs, no mdevs.
	ModeHost Mode = "host"
)

// Modes lists every mode, in the order docs/layout.md describes them.
var Modes = []Mode{ModePassthrough, ModeSRIOV, ModeMdev, ModeVendorVFIO, ModeMIG, ModeHost}

// GuestKind returns the kind of GPU a guest gets from the devices mode m prepares: a whole
// GPU for passthrough, a plain VF for sriov, an mdev instance for mdev, a vendor-VFIO VF for
// vendor-vfio and a MIG-backed one for mig. ModeHost (and a mode this function does not know)
// prepares nothing for guests: false.
func (m Mode) GuestKind() (vgpu.Kind, bool) {
	switch m {
	case ModePassthrough:
		return vgpu.Passthrough, true
	case ModeSRIOV:
		return vgpu.SRIOVVF, true
	case ModeMdev:
		return vgpu.Mdev, true
	case ModeVendorVFIO:
		return vgpu.VendorVFIO, true
	case ModeMIG:
		return vgpu.MIGVendorVFIO, true
	}
	return "", false
}

// modeList is the modes for a message: "passthrough, sriov, …".
func modeList() string {
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// Limits on what one entry may ask for: far above any real GPU, low enough that a typo cannot
// make a plan of millions of steps.
const (
	MaxCount   = 1024 // instances of one type or profile
	MaxVFs     = 4096 // the PCIe limit on VFs per PF is 65535; no GPU comes close
	MaxEntries = 1024 // entries per configuration, and configurations per file
)

// File is a host layout file.
type File struct {
	APIVersion string             `yaml:"apiVersion" json:"apiVersion"`
	Kind       string             `yaml:"kind" json:"kind"`
	Configs    map[string]*Config `yaml:"configs" json:"configs"`

	lines map[string]int
}

// Config is one named configuration: what each selected GPU is for.
type Config struct {
	// Default marks the configuration used when --config is not given (at most one may).
	Default bool `yaml:"default,omitempty" json:"default,omitempty"`
	// Description is free text for people.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// GPUs are the entries, each selecting devices and giving them a mode.
	GPUs []Entry `yaml:"gpus" json:"gpus"`
}

// Entry gives the devices its selector matches one mode.
type Entry struct {
	Select Selector `yaml:"select" json:"select"`
	Mode   Mode     `yaml:"mode" json:"mode"`
	// VFs is the number of SR-IOV VFs (sriov: required; vendor-vfio and mig: optional,
	// default sriov_totalvfs for vendor-vfio).
	VFs int `yaml:"vfs,omitempty" json:"vfs,omitempty"`
	// VFDriver is where sriov VFs go: "keep" (the kernel's choice, default) or "vfio-pci".
	VFDriver string `yaml:"vfDriver,omitempty" json:"vfDriver,omitempty"`
	// Types are mdev types (mdev) or NVIDIA vGPU types (vendor-vfio), by id or name, each
	// with a count.
	Types []TypeCount `yaml:"types,omitempty" json:"types,omitempty"`
	// Profiles are MIG GPU-instance profiles (mig), each with a count.
	Profiles []ProfileCount `yaml:"profiles,omitempty" json:"profiles,omitempty"`
	// VGPUTypes are MIG-backed vGPU types on the GPU's VFs (mig, optional).
	VGPUTypes []TypeCount `yaml:"vgpuTypes,omitempty" json:"vgpuTypes,omitempty"`
}

// Selector picks devices: exactly one of address, parent, vendor+device, model or all.
type Selector struct {
	// Address is one PCI function (0000:41:00.0 or 41:00.0).
	Address string `yaml:"address,omitempty" json:"address,omitempty"`
	// Parent is a virtual mdev parent by name ("mbochs", "mdpy").
	Parent string `yaml:"parent,omitempty" json:"parent,omitempty"`
	// Vendor and Device are PCI ids ("10de", "20b5"): every GPU with both.
	Vendor string `yaml:"vendor,omitempty" json:"vendor,omitempty"`
	Device string `yaml:"device,omitempty" json:"device,omitempty"`
	// Model matches GPUs whose pci.ids device name contains it (case-insensitive).
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// All matches every GPU and virtual mdev parent that no other entry of the configuration
	// names.
	All bool `yaml:"all,omitempty" json:"all,omitempty"`
}

// TypeCount is an mdev or vGPU type (id or name, matched by vgpu's one profile matcher) and
// how many instances of it.
type TypeCount struct {
	Type  string `yaml:"type" json:"type"`
	Count int    `yaml:"count" json:"count"`
}

// ProfileCount is a MIG GPU-instance profile ("1g.10gb", "3g.40gb") and how many of it.
type ProfileCount struct {
	Profile string `yaml:"profile" json:"profile"`
	Count   int    `yaml:"count" json:"count"`
}

// String names the selector the way the file wrote it.
func (s Selector) String() string {
	switch {
	case s.Address != "":
		return "address " + s.Address
	case s.Parent != "":
		return "parent " + s.Parent
	case s.Vendor != "":
		return "vendor " + s.Vendor + " device " + s.Device
	case s.Model != "":
		return fmt.Sprintf("model %q", s.Model)
	case s.All:
		return "all"
	}
	return "nothing"
}

// ReadFile reads, parses and validates the layout file at path (at most host.MaxSpecSize
// bytes), and returns its content too (apply stores it with the selection).
func ReadFile(path string) (*File, []byte, error) {
	b, err := host.ReadFileLimit(path, host.MaxSpecSize)
	if errors.Is(err, host.ErrInvalid) {
		return nil, nil, fmt.Errorf("read layout: %w", err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read layout: %w: %w", err, host.ErrInvalid)
	}
	f, err := ParseFile(path, b)
	if err != nil {
		return nil, nil, err
	}
	return f, b, nil
}

// ParseFile is Parse of data, the content of the layout file path (read by ReadFile, or sent
// to the agent by the caller's CLI), its errors naming path.
func ParseFile(path string, data []byte) (*File, error) {
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse decodes (strictly: unknown fields, duplicate keys or config names, wrong types and a
// second document are errors naming the line) and validates a layout. Errors wrap
// host.ErrInvalid.
func Parse(data []byte) (*File, error) {
	f := &File{}
	lines, err := strictyaml.Decode(data, "layout", Kind, f)
	if err != nil {
		return nil, err
	}
	f.lines = lines
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// Line returns the YAML line of a field path ("configs.vdi.gpus[0].mode"), or 0.
func (f *File) Line(path string) int { return f.lines[path] }

// Names returns the configuration names, sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Configs))
	for n := range f.Configs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Select returns the configuration name picks; with name "" the only one, or the one marked
// default. A missing or ambiguous name is host.ErrInvalid naming the choices.
func (f *File) Select(name string) (string, *Config, error) {
	names := f.Names()
	if name != "" {
		if c, ok := f.Configs[name]; ok {
			return name, c, nil
		}
		return "", nil, fmt.Errorf("layout has no configuration %q: %w (it has: %s)", name, host.ErrNotFound, strings.Join(names, ", "))
	}
	if len(names) == 1 {
		return names[0], f.Configs[names[0]], nil
	}
	for _, n := range names {
		if f.Configs[n].Default {
			return n, f.Configs[n], nil
		}
	}
	return "", nil, fmt.Errorf("layout: %w: it has %d configurations (%s) and none is marked default: true; pick one with --config NAME",
		host.ErrInvalid, len(names), strings.Join(names, ", "))
}

// InvalidFileError lists every problem of a layout, each with its field path and line.
type InvalidFileError struct{ Problems []string }

func (e *InvalidFileError) Error() string {
	return "invalid layout:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// Unwrap makes an InvalidFileError a host.ErrInvalid (exit 2).
func (e *InvalidFileError) Unwrap() error { return host.ErrInvalid }

// Compiled on first use: compiled at package init they cost every vgpu-host command a third of
// a millisecond of start-up (GODEBUG=inittrace=1), layout or not.
var (
	configNameRE = lazy.Regexp{Expr: `^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`}
	pciIDRE      = lazy.Regexp{Expr: `^[0-9a-fA-F]{4}$`}
)

type validator struct {
	f        *File
	problems []string
}

func (v *validator) add(path, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if l := strictyaml.LineOf(v.f.lines, path); l > 0 {
		v.problems = append(v.problems, fmt.Sprintf("line %d: %s: %s", l, path, msg))
		return
	}
	v.problems = append(v.problems, fmt.Sprintf("%s: %s", path, msg))
}

// Validate checks every value: apiVersion and kind, configuration names, at most one default,
// each entry's selector (exactly one kind, well-formed) and mode and the fields that mode takes,
// counts within limits, and no two entries of a configuration with the same selector.
func (f *File) Validate() error {
	v := &validator{f: f}
	if f.APIVersion != APIVersion {
		v.add("apiVersion", "is %q, want %q", f.APIVersion, APIVersion)
	}
	if f.Kind != Kind {
		v.add("kind", "is %q, want %q", f.Kind, Kind)
	}
	if len(f.Configs) == 0 {
		v.add("configs", "no configurations: name at least one (configs: {NAME: {gpus: [...]}})")
	}
	if len(f.Configs) > MaxEntries {
		v.add("configs", "%d configurations, at most %d", len(f.Configs), MaxEntries)
	}
	var defaults []string
	for _, name := range f.Names() {
		c := f.Configs[name]
		p := "configs." + name
		if !configNameRE.Get().MatchString(name) {
			v.add(p, "configuration name %q: use letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)", name)
		}
		if c == nil {
			v.add(p, "is empty: give it gpus: [...]")
			continue
		}
		if c.Default {
			defaults = append(defaults, name)
		}
		v.config(p, c)
	}
	if len(defaults) > 1 {
		v.add("configs", "%d configurations are marked default: true (%s); at most one may be", len(defaults), strings.Join(defaults, ", "))
	}
	if len(v.problems) > 0 {
		return &InvalidFileError{Problems: v.problems}
	}
	return nil
}

func (v *validator) config(p string, c *Config) {
	if len(c.GPUs) > MaxEntries {
		v.add(p+".gpus", "%d entries, at most %d", len(c.GPUs), MaxEntries)
		return
	}
	seen := map[string]string{}
	for i, e := range c.GPUs {
		ep := fmt.Sprintf("%s.gpus[%d]", p, i)
		key := v.selector(ep+".select", e.Select)
		if key != "" {
			if prev, dup := seen[key]; dup {
				v.add(ep+".select", "selects %s, as %s does: a device gets one mode", e.Select, prev)
			} else {
				seen[key] = ep
			}
		}
		v.entry(ep, e)
	}
}

// selector validates s and returns a key naming what it selects ("" when invalid).
func (v *validator) selector(p string, s Selector) string {
	kinds := 0
	for _, set := range []bool{s.Address != "", s.Parent != "", s.Vendor != "" || s.Device != "", s.Model != "", s.All} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		v.add(p, "name exactly one of address, parent, vendor+device, model or all (got %d)", kinds)
		return ""
	}
	switch {
	case s.Address != "":
		a, err := host.ParseAddress(s.Address)
		if err != nil {
			v.add(p+".address", "%v", err)
			return ""
		}
		return "address " + a.String()
	case s.Parent != "":
		if err := host.CheckComponent("mdev parent", s.Parent); err != nil {
			v.add(p+".parent", "%v", err)
			return ""
		}
		if _, err := host.ParseAddress(s.Parent); err == nil {
			v.add(p+".parent", "%q is a PCI address: use address: for PCI devices, parent: for virtual mdev parents (mbochs, mdpy)", s.Parent)
			return ""
		}
		return "parent " + s.Parent
	case s.Vendor != "" || s.Device != "":
		ok := true
		for _, f := range []struct{ name, val string }{{"vendor", s.Vendor}, {"device", s.Device}} {
			if !pciIDRE.Get().MatchString(f.val) {
				v.add(p+"."+f.name, "%q: want a 4-digit hex PCI id (vendor and device go together, e.g. vendor: \"10de\", device: \"20b5\")", f.val)
				ok = false
			}
		}
		if !ok {
			return ""
		}
		return "id " + strings.ToLower(s.Vendor+":"+s.Device)
	case s.Model != "":
		if strings.TrimSpace(s.Model) == "" || len(s.Model) > 200 {
			v.add(p+".model", "want a non-empty part of a device name, at most 200 bytes")
			return ""
		}
		return "model " + strings.ToLower(s.Model)
	}
	return "all"
}

func (v *validator) entry(p string, e Entry) {
	known := false
	for _, m := range Modes {
		known = known || e.Mode == m
	}
	if !known {
		v.add(p+".mode", "%q: want one of %s", e.Mode, modeList())
		return
	}
	not := func(field string, set bool) {
		if set {
			v.add(p+"."+field, "is not used by mode %s", e.Mode)
		}
	}
	if e.VFs < 0 || e.VFs > MaxVFs {
		v.add(p+".vfs", "%d: want 0..%d", e.VFs, MaxVFs)
	}
	if e.VFDriver != "" && e.VFDriver != "keep" && e.VFDriver != "vfio-pci" {
		v.add(p+".vfDriver", "%q: want keep or vfio-pci", e.VFDriver)
	}
	switch e.Mode {
	case ModePassthrough, ModeHost:
		not("vfs", e.VFs != 0)
		not("vfDriver", e.VFDriver != "")
		not("types", len(e.Types) > 0)
		not("profiles", len(e.Profiles) > 0)
		not("vgpuTypes", len(e.VGPUTypes) > 0)
	case ModeSRIOV:
		if e.VFs == 0 {
			v.add(p+".vfs", "mode sriov needs vfs: N (1..sriov_totalvfs); mode host gives a device 0 VFs")
		}
		not("types", len(e.Types) > 0)
		not("profiles", len(e.Profiles) > 0)
		not("vgpuTypes", len(e.VGPUTypes) > 0)
	case ModeMdev:
		not("vfs", e.VFs != 0)
		not("vfDriver", e.VFDriver != "")
		not("profiles", len(e.Profiles) > 0)
		not("vgpuTypes", len(e.VGPUTypes) > 0)
		v.types(p+".types", e.Types, true)
	case ModeVendorVFIO:
		not("vfDriver", e.VFDriver != "")
		not("profiles", len(e.Profiles) > 0)
		not("vgpuTypes", len(e.VGPUTypes) > 0)
		n := v.types(p+".types", e.Types, true)
		if e.VFs > 0 && n > e.VFs {
			v.add(p+".types", "%d instances need %d VFs, but vfs is %d (each vendor-VFIO instance is one VF)", n, n, e.VFs)
		}
	case ModeMIG:
		not("vfDriver", e.VFDriver != "")
		not("types", len(e.Types) > 0)
		v.profiles(p+".profiles", e.Profiles)
		n := v.types(p+".vgpuTypes", e.VGPUTypes, false)
		if e.VFs > 0 && n > e.VFs {
			v.add(p+".vgpuTypes", "%d instances need %d VFs, but vfs is %d", n, n, e.VFs)
		}
	}
}

// types validates a type list and returns the instance total.
func (v *validator) types(p string, ts []TypeCount, required bool) int {
	if required && len(ts) == 0 {
		v.add(p, "name at least one type: [{type: ID-or-name, count: N}]")
	}
	total := 0
	seen := map[string]int{}
	for i, t := range ts {
		tp := fmt.Sprintf("%s[%d]", p, i)
		if strings.TrimSpace(t.Type) == "" || len(t.Type) > 200 {
			v.add(tp+".type", "want a type id or name (mdev types: vgpu-host mdev types)")
		}
		if t.Count < 1 || t.Count > MaxCount {
			v.add(tp+".count", "%d: want 1..%d", t.Count, MaxCount)
		}
		key := strings.ToLower(t.Type)
		if j, dup := seen[key]; dup {
			v.add(tp+".type", "%q is listed twice (also %s[%d]): give one count", t.Type, p, j)
		}
		seen[key] = i
		total += max(t.Count, 0)
	}
	return total
}

func (v *validator) profiles(p string, ps []ProfileCount) {
	if len(ps) == 0 {
		v.add(p, "name at least one MIG profile: [{profile: 1g.10gb, count: 7}]")
	}
	slices := 0
	for i, pc := range ps {
		pp := fmt.Sprintf("%s[%d]", p, i)
		// mig.ParseProfile is the one parser of profile names: what nvidia-smi prints
		// ("3g.40gb", "MIG 1g.18gb", "1g.18gb+me") or a profile ID ("9"), whose slices only the
		// GPU knows (the plan checks them).
		if ref, err := mig.ParseProfile(pc.Profile); err != nil {
			v.add(pp+".profile", "%q: want a MIG profile as nvidia-smi prints it (1g.10gb, 3g.40gb, 1g.10gb+me, MIG 2g.35gb) or its profile ID (9)", pc.Profile)
		} else {
			slices += ref.ComputeSlices * max(pc.Count, 0)
		}
		if pc.Count < 1 || pc.Count > 7 {
			v.add(pp+".count", "%d: want 1..7 (a GPU has at most 7 MIG slices)", pc.Count)
		}
	}
	if slices > 8 {
		v.add(p, "%d compute slices asked; no GPU has more than 8 (an A100/H100 has 7)", slices)
	}
}
