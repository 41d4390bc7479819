package native

import (
	"context"
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-host/vgpu-host/virt"
)

// hperr is lverr for AttachDevice and DetachDevice (virt.HotplugError).
func hperr(err error, what string) error {
	if err == nil {
		return nil
	}
	var le libvirt.Error
	if errors.As(err, &le) {
		return virt.HotplugError(what, int(le.Code), le.Message, le.Domain == libvirt.FROM_RPC)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// AttachDevice adds a device (virDomainAttachDeviceFlags).
func (l *Libvirt) AttachDevice(_ context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	d, err := l.domain(name)
	if err != nil {
		return err
	}
	defer d.Free()
	return hperr(d.AttachDeviceFlags(deviceXML, libvirt.DomainDeviceModifyFlags(scope)), fmt.Sprintf("attach device to domain %s (%s)", name, scope))
}

// DetachDevice asks for a device's removal (virDomainDetachDeviceFlags): live, the guest
// releases it later.
func (l *Libvirt) DetachDevice(_ context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	d, err := l.domain(name)
	if err != nil {
		return err
	}
	defer d.Free()
	return hperr(d.DetachDeviceFlags(deviceXML, libvirt.DomainDeviceModifyFlags(scope)), fmt.Sprintf("detach device from domain %s (%s)", name, scope))
}

// LiveDomainXML returns the domain's live XML.
func (l *Libvirt) LiveDomainXML(_ context.Context, name string) (string, error) {
	d, err := l.domain(name)
	if err != nil {
		return "", err
	}
	defer d.Free()
	x, err := d.GetXMLDesc(0)
	return x, lverr(err, "live XML of domain "+name)
}
