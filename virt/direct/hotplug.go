package direct

import (
	"context"
	"errors"
	"fmt"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-host/vgpu-host/virt"
)

// hperr is err for AttachDevice and DetachDevice (virt.HotplugError).
func (c *Conn) hperr(err error, what string) error {
	var le libvirt.Error
	if errors.As(err, &le) {
		return virt.HotplugError(what, int(le.Code), le.Message, false)
	}
	return c.err(err, what)
}

// AttachDevice adds a device (virDomainAttachDeviceFlags).
func (c *Conn) AttachDevice(_ context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	return c.hperr(c.l.DomainAttachDeviceFlags(d, deviceXML, uint32(scope)), fmt.Sprintf("attach device to domain %s (%s)", name, scope))
}

// DetachDevice asks for a device's removal (virDomainDetachDeviceFlags): live, the guest
// releases it later.
func (c *Conn) DetachDevice(_ context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	return c.hperr(c.l.DomainDetachDeviceFlags(d, deviceXML, uint32(scope)), fmt.Sprintf("detach device from domain %s (%s)", name, scope))
}

// LiveDomainXML returns the domain's live XML.
func (c *Conn) LiveDomainXML(_ context.Context, name string) (string, error) {
	d, err := c.domain(name)
	if err != nil {
		return "", err
	}
	x, err := c.l.DomainGetXMLDesc(d, 0)
	if err := c.err(err, "live XML of domain "+name); err != nil {
		return "", err
	}
	return x, nil
}
