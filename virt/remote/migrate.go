package remote

import (
	"context"

	"github.com/vgpu-host/vgpu-host/virt"
)

// MigrateArgs carries a migration request (wire type).
type MigrateArgs struct {
	Name    string
	Options virt.MigrateOptions
}

// MigratableXML implements virt.Conn.
func (c *Client) MigratableXML(ctx context.Context, name string) (string, error) {
	var r string
	return r, c.call(ctx, "MigratableXML", NameArgs{Name: name}, &r)
}

// Migrate implements virt.Conn. A ctx that ends returns at once; the helper's migration goes
// on until libvirt ends it (the helper exits, and its connection with it, when the client
// closes).
func (c *Client) Migrate(ctx context.Context, name string, o virt.MigrateOptions) error {
	return c.call(ctx, "Migrate", MigrateArgs{Name: name, Options: o}, &Empty{})
}

// MigratableXML forwards virt.Conn.MigratableXML.
func (s *Server) MigratableXML(a NameArgs, r *string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.MigratableXML(bg, a.Name); return })
}

// Migrate forwards virt.Conn.Migrate.
func (s *Server) Migrate(a MigrateArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.Migrate(bg, a.Name, a.Options) })
}
