package remote

import (
	"context"

	"github.com/vgpu-host/vgpu-host/virt"
)

// DeviceArgs carries one device's XML for a domain and where to change it.
type DeviceArgs struct {
	Name, XML string
	Scope     virt.DeviceScope
}

// AttachDevice implements virt.Conn.
func (c *Client) AttachDevice(ctx context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	return c.call(ctx, "AttachDevice", DeviceArgs{Name: name, XML: deviceXML, Scope: scope}, &Empty{})
}

// DetachDevice implements virt.Conn.
func (c *Client) DetachDevice(ctx context.Context, name, deviceXML string, scope virt.DeviceScope) error {
	return c.call(ctx, "DetachDevice", DeviceArgs{Name: name, XML: deviceXML, Scope: scope}, &Empty{})
}

// LiveDomainXML implements virt.Conn.
func (c *Client) LiveDomainXML(ctx context.Context, name string) (string, error) {
	var r string
	return r, c.call(ctx, "LiveDomainXML", NameArgs{Name: name}, &r)
}

// AttachDevice forwards virt.Conn.AttachDevice.
func (s *Server) AttachDevice(a DeviceArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.AttachDevice(bg, a.Name, a.XML, a.Scope) })
}

// DetachDevice forwards virt.Conn.DetachDevice.
func (s *Server) DetachDevice(a DeviceArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.DetachDevice(bg, a.Name, a.XML, a.Scope) })
}

// LiveDomainXML forwards virt.Conn.LiveDomainXML.
func (s *Server) LiveDomainXML(a NameArgs, r *string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.LiveDomainXML(bg, a.Name); return })
}
