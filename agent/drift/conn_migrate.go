package drift

import (
	"context"

	"github.com/vgpu-host/vgpu-host/virt"
)

// MigratableXML implements virt.Conn.
func (c *Conn) MigratableXML(ctx context.Context, name string) (r string, err error) {
	err = c.do(func(v virt.Conn) (e error) { r, e = v.MigratableXML(ctx, name); return })
	return
}

// Migrate implements virt.Conn.
func (c *Conn) Migrate(ctx context.Context, name string, o virt.MigrateOptions) error {
	return c.do(func(v virt.Conn) error { return v.Migrate(ctx, name, o) })
}
