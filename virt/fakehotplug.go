package virt

import (
	"context"
	"fmt"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// HoldDetach makes the fake's guests ignore live detach requests (a guest that never releases
// the device: WaitDeviceGone times out); false restores it.
func (f *Fake) HoldDetach(hold bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holdDetach = hold
}

// AttachDevice adds the device to the fake domain's live XML (scope DeviceLive, running
// domains only) and/or its persistent XML. As libvirt 9.0, it refuses a live <video>
// (ErrDeviceNotHotpluggable) and a hostdev the domain has already.
func (f *Fake) AttachDevice(_ context.Context, name, deviceXML string, scope DeviceScope) error {
	return f.changeDevice("AttachDevice", name, deviceXML, scope, true)
}

// DetachDevice removes the device from the fake domain's live XML (unless HoldDetach) and/or
// its persistent XML.
func (f *Fake) DetachDevice(_ context.Context, name, deviceXML string, scope DeviceScope) error {
	return f.changeDevice("DetachDevice", name, deviceXML, scope, false)
}

// LiveDomainXML returns the live XML of a running fake domain, else its persistent XML.
func (f *Fake) LiveDomainXML(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.dom(name)
	if err != nil {
		return "", err
	}
	return d.liveXML(), nil
}

func (d *fakeDomain) liveXML() string {
	if d.state == StateRunning && d.live != "" {
		return d.live
	}
	return d.xml
}

func (f *Fake) changeDevice(method, name, deviceXML string, scope DeviceScope, attach bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(method, name); err != nil {
		return err
	}
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	key, err := DeviceKey(deviceXML)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, name, err)
	}
	verb := "attach"
	if !attach {
		verb = "detach"
	}
	if scope&DeviceLive != 0 {
		if d.state != StateRunning {
			return fmt.Errorf("%s device to domain %s: Requested operation is not valid: domain is not running", verb, name)
		}
		if strings.HasPrefix(key, "video:") {
			return fmt.Errorf("%s device to domain %s: live %s of device 'video' is not supported (%w)", verb, name, verb, ErrDeviceNotHotpluggable)
		}
	}
	// Check both scopes before changing either, as libvirt does.
	var live, config string
	if scope&DeviceLive != 0 && !(f.holdDetach && !attach) {
		if live, err = editDevices(d.liveXML(), deviceXML, key, attach); err != nil {
			return fmt.Errorf("%s device to domain %s (live): %w", verb, name, err)
		}
	}
	if scope&DeviceConfig != 0 {
		if config, err = editDevices(d.xml, deviceXML, key, attach); err != nil {
			return fmt.Errorf("%s device to domain %s (config): %w", verb, name, err)
		}
	}
	if scope&DeviceLive != 0 && !(f.holdDetach && !attach) {
		d.live = live
	}
	if config != "" {
		if d.state == StateRunning && d.live == "" {
			d.live = d.xml // the guest keeps running what it booted
		}
		d.xml = config
	}
	return nil
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
