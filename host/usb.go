package host

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// USBDevice is one device on the host's USB buses, as /sys/bus/usb/devices/BUS-PORT[.PORT…]
// describes it (the kernel's USB sysfs ABI; interfaces, named with a colon, are skipped).
type USBDevice struct {
	// Bus and Device are lsusb's "Bus 001 Device 004" (busnum, devnum).
	Bus    int `json:"bus"`
	Device int `json:"device"`
	// Vendor and Product are the 4-digit hex ids (idVendor, idProduct), lsusb's 046d:c52b.
	Vendor  string `json:"vendor"`
	Product string `json:"product"`
	// Name is the device's product string, when it has one.
	Name string `json:"name,omitempty"`
	// Port is the sysfs name: 1-2.3 (bus 1, port 2, then port 3 of a hub).
	Port string `json:"port"`
}

// USBDevices lists the host's USB devices, root hubs included, by bus then device number.
// A host without USB (no /sys/bus/usb) has none.
func USBDevices(root Root) ([]USBDevice, error) {
	dir := root.Sys("bus", "usb", "devices")
	ents, err := root.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list USB devices: %w", err)
	}
	var out []USBDevice
	for _, e := range ents {
		name := e.Name()
		if strings.Contains(name, ":") {
			continue // an interface of a device
		}
		attr := func(a string) string {
			v, _ := root.readAttr(root.Sys("bus", "usb", "devices", name, a))
			return v
		}
		bus, err1 := strconv.Atoi(attr("busnum"))
		dev, err2 := strconv.Atoi(attr("devnum"))
		if err1 != nil || err2 != nil {
			continue // gone while we looked, or not a device
		}
		out = append(out, USBDevice{Bus: bus, Device: dev, Vendor: attr("idVendor"), Product: attr("idProduct"), Name: attr("product"), Port: name})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bus != out[j].Bus {
			return out[i].Bus < out[j].Bus
		}
		return out[i].Device < out[j].Device
	})
	return out, nil
}
