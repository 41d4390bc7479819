package domains

import (
	"fmt"
	"github.com/vgpu-host/vgpu-host/internal/strictyaml"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Topology is the guest CPU topology; Sockets*Cores*Threads must equal spec.vcpus.
type Topology struct {
	Sockets int `yaml:"sockets,omitempty" json:"sockets,omitempty"` // default 1
	Cores   int `yaml:"cores,omitempty" json:"cores,omitempty"`     // default vcpus/(sockets*threads)
	Threads int `yaml:"threads,omitempty" json:"threads,omitempty"` // default 1
}

// Pin is spec.cpu.pin: Auto, or one host CPU per vCPU.
type Pin struct {
	Auto bool
	CPUs []int
	line int
	err  error
}

// UnmarshalYAML accepts "auto" or a list of host CPU numbers; Validate reports a bad value.
func (p *Pin) UnmarshalYAML(n *yaml.Node) error {
	*p = Pin{line: n.Line}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value != "auto" {
			p.err = fmt.Errorf("%q: want auto or a list of host CPUs", n.Value)
		}
		p.Auto = true
	case yaml.SequenceNode:
		for _, c := range n.Content {
			i, err := strconv.Atoi(c.Value)
			if c.Kind != yaml.ScalarNode || c.ShortTag() != "!!int" || err != nil || i < 0 {
				p.err = fmt.Errorf("line %d: %q is not a host CPU number", c.Line, c.Value)
				return nil
			}
			p.CPUs = append(p.CPUs, i)
		}
	default:
		p.err = fmt.Errorf("want auto or a list of host CPUs, got a %s", strictyaml.KindName(n.Kind))
	}
	return nil
}

// MarshalYAML writes auto or the list.
func (p Pin) MarshalYAML() (any, error) {
	if p.Auto {
		return "auto", nil
	}
	return p.CPUs, nil
}

// MarshalJSON writes "auto" or the list.
func (p Pin) MarshalJSON() ([]byte, error) {
	if p.Auto {
		return []byte(`"auto"`), nil
	}
	s := "["
	for i, c := range p.CPUs {
		if i > 0 {
			s += ","
		}
		s += strconv.Itoa(c)
	}
	return []byte(s + "]"), nil
}

// Devices are a VM's devices besides disks, GPUs and its first NIC.
type Devices struct {
	// USBController is the USB controller model: qemu-xhci, nec-xhci, ich9-ehci1, or none
	// (no USB at all; graphics then get no USB tablet). Default: libvirt's for the machine.
	USBController string `yaml:"usbController,omitempty" json:"usbController,omitempty"`
	// Evdev are host input devices (/dev/input/by-id/...-event-kbd) given to the guest.
	Evdev []Evdev `yaml:"evdev,omitempty" json:"evdev,omitempty"`
	// LookingGlass adds the ivshmem shared-memory device Looking Glass copies frames through.
	LookingGlass *LookingGlass `yaml:"lookingGlass,omitempty" json:"lookingGlass,omitempty"`
	// NICs are NICs after spec.network: each a network, bridge or macvtap.
	NICs []NIC `yaml:"nics,omitempty" json:"nics,omitempty"`
	// Sound is a sound device model: ich9, ich6, ac97 (default none).
	Sound string `yaml:"sound,omitempty" json:"sound,omitempty"`
	// USB are host USB devices given to the guest (a dongle, a licence key, a game pad).
	USB []USBDevice `yaml:"usb,omitempty" json:"usb,omitempty"`
}

// USBDevice names one host USB device: by Vendor and Product id (lsusb's 046d:c52b; the
// first such device, wherever it is plugged), or by Bus and Device number (lsusb's "Bus 001
// Device 004"; the number changes when it is plugged again).
type USBDevice struct {
	Vendor  string `yaml:"vendor,omitempty" json:"vendor,omitempty"`
	Product string `yaml:"product,omitempty" json:"product,omitempty"`
	Bus     int    `yaml:"bus,omitempty" json:"bus,omitempty"`
	Device  int    `yaml:"device,omitempty" json:"device,omitempty"`
}

// String is the device as lsusb shows it: 046d:c52b or 001/004.
func (u USBDevice) String() string {
	if u.Vendor != "" || u.Product != "" {
		return u.Vendor + ":" + u.Product
	}
	return fmt.Sprintf("%03d/%03d", u.Bus, u.Device)
}

// Evdev is one host input device passed to the guest through evdev.
type Evdev struct {
	Path string `yaml:"path" json:"path"`
	// Grab gives the guest all of the device (keyboards: grab all); GrabToggle is the key
	// combination that switches the keyboard and mouse between host and guest: ctrl-ctrl
	// (default), alt-alt, shift-shift, meta-meta, scrolllock, ctrl-scrolllock.
	Grab       bool   `yaml:"grab,omitempty" json:"grab,omitempty"`
	GrabToggle string `yaml:"grabToggle,omitempty" json:"grabToggle,omitempty"`
}

// LookingGlass is the ivshmem device of Looking Glass, sized for Resolution.
type LookingGlass struct {
	// Resolution is the guest's largest frame, WIDTHxHEIGHT, e.g. 1920x1080.
	Resolution string `yaml:"resolution" json:"resolution"`
}

// NIC is a further network interface.
type NIC struct {
	Type    string `yaml:"type" json:"type"`                           // network, bridge, macvtap or hostdev
	Network string `yaml:"network,omitempty" json:"network,omitempty"` // type network
	Bridge  string `yaml:"bridge,omitempty" json:"bridge,omitempty"`   // type bridge
	Dev     string `yaml:"dev,omitempty" json:"dev,omitempty"`         // type macvtap: the host interface
	Mode    string `yaml:"mode,omitempty" json:"mode,omitempty"`       // macvtap: bridge (default), vepa, private, passthrough
	Model   string `yaml:"model,omitempty" json:"model,omitempty"`     // virtio (default), e1000e, rtl8139
	MAC     string `yaml:"mac,omitempty" json:"mac,omitempty"`
	// VF is an SR-IOV NIC VF's PCI address (type hostdev): the guest gets the VF itself
	// (<interface type='hostdev' managed='no'>), which must be on vfio-pci already
	// (`vgpu-host vf enable PF --driver vfio-pci`); the MAC is set on the VF through its PF.
	VF string `yaml:"vf,omitempty" json:"vf,omitempty"`
}

// LookingGlassMiB is the ivshmem size for a frame of width x height: two 32-bit frames plus
// 10 MiB for the cursor and headers, rounded up to a power of two MiB (1920x1080: 32 MiB).
func LookingGlassMiB(width, height uint64) uint64 {
	need := width*height*4*2 + 10<<20
	mib := (need + 1<<20 - 1) >> 20
	p := uint64(1)
	for p < mib {
		p <<= 1
	}
	return p
}
