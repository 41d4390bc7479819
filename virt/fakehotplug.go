package virt

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// HoldDetach makes the fake's guests ignore live detach requests (a guest that never releases
// the device: WaitDeviceGone times out); false restores it.
func (f *Fake) HoldDetach(hold bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holdDetach = hold
}

// DetachWait makes a live DetachDevice that the guest does not answer (HoldDetach) block for
// d before it returns, as libvirt 9.0's QEMU driver does: it waits 5 s for QEMU's
// DEVICE_DELETED event itself and then returns success with the unplug still pending.
func (f *Fake) DetachWait(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detachWait = d
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
	err := f.changeDevice("DetachDevice", name, deviceXML, scope, false)
	f.mu.Lock()
	wait := f.detachWait
	if !f.holdDetach || scope&DeviceLive == 0 {
		wait = 0
	}
	f.mu.Unlock()
	time.Sleep(wait)
	return err
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
	}
	if strings.HasPrefix(key, "video:") {
		// libvirt 9.0 refuses both: "live attach of device 'video' is not supported", and
		// "persistent attach ..." (EditDefinition redefines instead).
		return fmt.Errorf("%s device to domain %s: %s of device 'video' is not supported (%w)", verb, name, verb, ErrDeviceNotHotpluggable)
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
