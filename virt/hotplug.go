package virt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
)

// DeviceScope says where AttachDevice and DetachDevice act: libvirt's
// VIR_DOMAIN_AFFECT_LIVE (1) and VIR_DOMAIN_AFFECT_CONFIG (2), the same numbers.
type DeviceScope uint

// The scopes; combine them with |.
const (
	// DeviceLive changes the running guest.
	DeviceLive DeviceScope = 1
	// DeviceConfig changes the persistent definition (the next boot).
	DeviceConfig DeviceScope = 2
)

// String is "live+config", "live" or "config".
func (s DeviceScope) String() string {
	var parts []string
	if s&DeviceLive != 0 {
		parts = append(parts, "live")
	}
	if s&DeviceConfig != 0 {
		parts = append(parts, "config")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// ErrDeviceNotHotpluggable is returned (wrapped) when libvirt cannot add or remove a device
// of this type in a running guest (libvirt 9.0's QEMU driver: <video>).
var ErrDeviceNotHotpluggable = errors.New("device type cannot be hotplugged")

// libvirt's VIR_ERR_OPERATION_UNSUPPORTED and VIR_ERR_CONFIG_UNSUPPORTED: what a live attach
// of a device type the driver cannot hotplug answers.
const (
	libvirtErrOperationUnsupported = 84
	libvirtErrConfigUnsupported    = 67
)

// HotplugError is LibvirtError for AttachDevice and DetachDevice: a refusal of the device
// type (libvirt's "live attach of device 'video' is not supported") also wraps
// ErrDeviceNotHotpluggable.
func HotplugError(what string, code int, msg string, rpcFailed bool) error {
	err := LibvirtError(what, code, msg, rpcFailed)
	if (code == libvirtErrOperationUnsupported || code == libvirtErrConfigUnsupported) && strings.Contains(msg, "is not supported") {
		return fmt.Errorf("%w (%w)", err, ErrDeviceNotHotpluggable)
	}
	return err
}

// DeviceKey names a device of domain XML the way hotplug finds it again: "pci:ADDR" for a PCI
// hostdev (by its host address), "mdev:UUID" for an mdev hostdev, "video:MODEL" for a video
// device. deviceXML is one <hostdev> or <video> element.
func DeviceKey(deviceXML string) (string, error) {
	x := strings.TrimSpace(deviceXML)
	switch {
	case strings.HasPrefix(x, "<hostdev"):
		var h libvirtxml.DomainHostdev
		if err := h.Unmarshal(x); err != nil {
			return "", fmt.Errorf("device XML: %w", err)
		}
		return hostdevKey(h)
	case strings.HasPrefix(x, "<video"):
		var v libvirtxml.DomainVideo
		if err := v.Unmarshal(x); err != nil {
			return "", fmt.Errorf("device XML: %w", err)
		}
		return "video:" + v.Model.Type, nil
	}
	return "", fmt.Errorf("device XML: want one <hostdev> or <video> element")
}

func hostdevKey(h libvirtxml.DomainHostdev) (string, error) {
	switch {
	case h.SubsysPCI != nil && h.SubsysPCI.Source != nil && h.SubsysPCI.Source.Address != nil:
		a := h.SubsysPCI.Source.Address
		if a.Domain == nil || a.Bus == nil || a.Slot == nil || a.Function == nil {
			return "", fmt.Errorf("device XML: PCI hostdev source address is incomplete")
		}
		return fmt.Sprintf("pci:%04x:%02x:%02x.%x", *a.Domain, *a.Bus, *a.Slot, *a.Function), nil
	case h.SubsysMDev != nil && h.SubsysMDev.Source != nil && h.SubsysMDev.Source.Address != nil:
		return "mdev:" + strings.ToLower(h.SubsysMDev.Source.Address.UUID), nil
	}
	return "", fmt.Errorf("device XML: a hostdev that is neither a PCI function nor an mdev")
}

// CountDevice returns how many devices of domainXML have key (DeviceKey): 0 or 1 for a
// hostdev, the number of video devices of that model for "video:MODEL".
func CountDevice(domainXML, key string) (int, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domainXML); err != nil {
		return 0, fmt.Errorf("domain XML: %w", err)
	}
	if d.Devices == nil {
		return 0, nil
	}
	n := 0
	for _, h := range d.Devices.Hostdevs {
		if k, err := hostdevKey(h); err == nil && k == key {
			n++
		}
	}
	for _, v := range d.Devices.Videos {
		if v.Model.Type != "" && "video:"+v.Model.Type == key {
			n++
		}
	}
	return n, nil
}

// WaitDeviceGone polls the live XML of domain name until it holds fewer than before devices
// of key (the guest released one that DetachDevice asked for), the domain stopped, or
// timeout passed: then it fails naming the device and the time waited. libvirt's
// device-removed event says the same; polling works on every Conn (the fakes, the helper,
// the socket) and costs one XML read per interval.
func WaitDeviceGone(ctx context.Context, c Conn, name, key string, before int, timeout time.Duration) error {
	return WaitDeviceGoneSince(ctx, c, name, key, before, time.Now(), timeout)
}

// WaitDeviceGoneSince is WaitDeviceGone with the timeout counted from start (when the detach
// was asked for), so that the time libvirt's DetachDevice spent waiting for the guest itself
// is part of it; it looks at the live XML at least once.
func WaitDeviceGoneSince(ctx context.Context, c Conn, name, key string, before int, start time.Time, timeout time.Duration) error {
	deadline := start.Add(timeout)
	interval := 50 * time.Millisecond
	for {
		st, err := c.State(ctx, name)
		if err != nil {
			return fmt.Errorf("wait for %s to leave domain %s: %w", key, name, err)
		}
		if st != StateRunning && st != StatePaused {
			return nil // a stopped guest holds nothing
		}
		x, err := c.LiveDomainXML(ctx, name)
		if err != nil {
			return fmt.Errorf("wait for %s to leave domain %s: %w", key, name, err)
		}
		n, err := CountDevice(x, key)
		if err != nil {
			return fmt.Errorf("wait for %s to leave domain %s: %w", key, name, err)
		}
		if n < before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("domain %s: the guest did not release %s within %s (its OS must accept the unplug: "+
				"ACPI/PCIe hotplug in the guest kernel; retry with a longer --timeout, or stop the VM and detach again): %w", name, key, timeout, host.ErrBusy)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to leave domain %s: %w", key, name, ctx.Err())
		case <-time.After(interval):
		}
		if interval < 500*time.Millisecond {
			interval *= 2
		}
	}
}

// editDevices adds (attach) or removes one device of key to/from domain XML x.
func editDevices(x, deviceXML, key string, attach bool) (string, error) {
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		return "", err
	}
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	n, _ := CountDevice(x, key)
	isVideo := strings.HasPrefix(key, "video:")
	switch {
	case attach && n > 0 && !isVideo:
		return "", fmt.Errorf("device %s is already in the domain", key)
	case !attach && n == 0:
		return "", fmt.Errorf("device %s not found in the domain", key)
	}
	if isVideo {
		var v libvirtxml.DomainVideo
		if err := v.Unmarshal(deviceXML); err != nil {
			return "", err
		}
		if attach {
			dom.Devices.Videos = append(dom.Devices.Videos, v)
		} else {
			for i := len(dom.Devices.Videos) - 1; i >= 0; i-- {
				if "video:"+dom.Devices.Videos[i].Model.Type == key {
					dom.Devices.Videos = append(dom.Devices.Videos[:i], dom.Devices.Videos[i+1:]...)
					break
				}
			}
		}
	} else {
		var h libvirtxml.DomainHostdev
		if err := h.Unmarshal(deviceXML); err != nil {
			return "", err
		}
		if attach {
			dom.Devices.Hostdevs = append(dom.Devices.Hostdevs, h)
		} else {
			for i, o := range dom.Devices.Hostdevs {
				if k, err := hostdevKey(o); err == nil && k == key {
					dom.Devices.Hostdevs = append(dom.Devices.Hostdevs[:i], dom.Devices.Hostdevs[i+1:]...)
					break
				}
			}
		}
	}
	return dom.Marshal()
}

// EditDefinition adds (attach) or removes one device of the domain's persistent definition
// by redefining it: what libvirt's DeviceConfig scope cannot do for a <video> (libvirt 9.0:
// "persistent attach of device 'video' is not supported"). A removal takes the last device of
// that key.
func EditDefinition(ctx context.Context, c Conn, name, deviceXML string, attach bool) error {
	key, err := DeviceKey(deviceXML)
	if err != nil {
		return err
	}
	x, err := c.DomainXML(ctx, name)
	if err != nil {
		return err
	}
	nx, err := editDevices(x, deviceXML, key, attach)
	if err != nil {
		return fmt.Errorf("edit the definition of domain %s: %w", name, err)
	}
	if _, err := c.Define(ctx, nx); err != nil {
		return fmt.Errorf("edit the definition of domain %s: %w", name, err)
	}
	return nil
}

// FreeRootPorts returns the indexes of the pcie-root-port controllers of domain XML x that no
// device sits behind, lowest first.
func FreeRootPorts(x string) ([]uint, error) {
	dec := xml.NewDecoder(strings.NewReader(x))
	ports := map[uint]bool{}
	used := map[uint]bool{}
	attr := func(se xml.StartElement, name string) string {
		for _, a := range se.Attr {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	num := func(s string) (uint, bool) {
		n, err := strconv.ParseUint(s, 0, 32)
		return uint(n), err == nil
	}
	var stack []string
	for {
		t, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("domain XML: %w", err)
		}
		switch se := t.(type) {
		case xml.StartElement:
			parent := ""
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			stack = append(stack, se.Name.Local)
			if se.Name.Local == "controller" && attr(se, "type") == "pci" && attr(se, "model") == "pcie-root-port" {
				if n, ok := num(attr(se, "index")); ok {
					ports[n] = true
				}
			}
			// A device's guest address (not a hostdev's <source><address>).
			if se.Name.Local == "address" && attr(se, "type") == "pci" && parent != "source" {
				if n, ok := num(attr(se, "bus")); ok {
					used[n] = true
				}
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	var out []uint
	for p := range ports {
		if !used[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ReserveRootPorts makes the defined q35 domain name keep at least want empty PCIe root ports
// for hotplug: libvirt places the controllers it adds itself (USB, virtio-serial) on the first
// free ports when it defines a domain, the empty ones the render reserved included, so the
// domain is read back and defined again with more empty ports until want are free. It returns
// how many ports it added (0: enough were free, or the machine is not q35).
func ReserveRootPorts(ctx context.Context, c Conn, name string, want int) (int, error) {
	if want <= 0 {
		return 0, nil
	}
	x, err := c.DomainXML(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("reserve hotplug ports of %s: %w", name, err)
	}
	free, err := FreeRootPorts(x)
	if err != nil || len(free) >= want {
		return 0, err
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return 0, fmt.Errorf("reserve hotplug ports of %s: %w", name, err)
	}
	if d.Devices == nil || d.OS == nil || d.OS.Type == nil || !strings.Contains(d.OS.Type.Machine, "q35") {
		return 0, nil
	}
	next := uint(0)
	for _, c := range d.Devices.Controllers {
		if c.Type == "pci" && c.Index != nil && *c.Index >= next {
			next = *c.Index + 1
		}
	}
	added := want - len(free)
	for range added {
		idx := next
		next++
		d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{Type: "pci", Index: &idx, Model: "pcie-root-port"})
	}
	nx, err := d.Marshal()
	if err != nil {
		return 0, fmt.Errorf("reserve hotplug ports of %s: %w", name, err)
	}
	if _, err := c.Define(ctx, nx); err != nil {
		return 0, fmt.Errorf("reserve hotplug ports of %s: %w", name, err)
	}
	return added, nil
}
