package virt

import "context"

// MigratableXML implements Conn.
func (p *Pending) MigratableXML(ctx context.Context, name string) (string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	return c.MigratableXML(ctx, name)
}

// Migrate implements Conn.
func (p *Pending) Migrate(ctx context.Context, name string, o MigrateOptions) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.Migrate(ctx, name, o)
}
