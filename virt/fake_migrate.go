package virt

import (
	"context"
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
)

// AddPeer makes dest the libvirtd that Migrate reaches at uri (tests of two hosts).
func (f *Fake) AddPeer(uri string, dest *Fake) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers == nil {
		f.peers = map[string]*Fake{}
	}
	f.peers[uri] = dest
}

// MigratableXML returns the running domain's XML.
func (f *Fake) MigratableXML(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("MigratableXML", name); err != nil {
		return "", err
	}
	d, err := f.dom(name)
	if err != nil {
		return "", err
	}
	if d.state != StateRunning {
		return "", fmt.Errorf("migratable XML of domain %s: domain is not running: %w", name, host.ErrInvalid)
	}
	return d.xml, nil
}

// Migrate moves the running domain to the peer AddPeer registered at o.DestURI, as libvirt's
// live, persistent, undefine-source migration would. Fail("Migrate") fails it before anything
// moves; Fail("MigrateIn") on the target makes the target refuse it.
func (f *Fake) Migrate(_ context.Context, name string, o MigrateOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter("Migrate", name+" "+o.DestURI); err != nil {
		return err
	}
	dest := f.peers[o.DestURI]
	if dest == nil {
		return fmt.Errorf("migrate domain %s: connect to %s: no such fake libvirt: %w", name, o.DestURI, ErrConnection)
	}
	dest.mu.Lock()
	defer dest.mu.Unlock()
	return migrateBetween(f, dest, name, o)
}

// migrateBetween moves domain name from src to dst; both are locked by the caller.
func migrateBetween(src, dst *Fake, name string, o MigrateOptions) error {
	if err := o.Check(); err != nil {
		return err
	}
	d, err := src.dom(name)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if d.state != StateRunning {
		return fmt.Errorf("migrate domain %s: domain is not running (live migration only): %w", name, host.ErrInvalid)
	}
	if err := dst.enter("MigrateIn", name); err != nil {
		return fmt.Errorf("migrate domain %s: target %s refused: %w", name, o.DestURI, err)
	}
	if _, ok := dst.doms[name]; ok {
		return fmt.Errorf("migrate domain %s: the target %s has a domain of that name: %w", name, o.DestURI, host.ErrBusy)
	}
	live, persist := d.xml, o.PersistXML
	if o.DestXML != "" {
		live = o.DestXML
	}
	if persist == "" {
		persist = live
	}
	for _, x := range []string{live, persist} {
		var dom libvirtxml.Domain
		if err := dom.Unmarshal(x); err != nil {
			return fmt.Errorf("migrate domain %s: destination XML: %w", name, err)
		}
		if dom.Name != name {
			return fmt.Errorf("migrate domain %s: destination XML names domain %q: %w", name, dom.Name, host.ErrInvalid)
		}
	}
	dst.doms[name] = &fakeDomain{xml: persist, state: StateRunning}
	delete(src.doms, name)
	return nil
}

// MigratableXML implements Conn.
func (c *FileConn) MigratableXML(ctx context.Context, name string) (x string, err error) {
	err = c.with(false, func(f *Fake) error { x, err = f.MigratableXML(ctx, name); return err })
	return x, err
}

// Migrate moves the running domain to the FileConn at o.DestURI (vgpu-fake:///PATH.json),
// taking the source's file lock, then the target's.
func (c *FileConn) Migrate(_ context.Context, name string, o MigrateOptions) error {
	dst, err := OpenFile(o.DestURI)
	if err != nil {
		return fmt.Errorf("migrate domain %s: %w", name, err)
	}
	if dst.path == c.path {
		return fmt.Errorf("migrate domain %s: the target %s is this libvirt: %w", name, o.DestURI, host.ErrInvalid)
	}
	return c.with(true, func(f *Fake) error {
		if err := f.enter("Migrate", name+" "+o.DestURI); err != nil {
			return err
		}
		return dst.with(true, func(df *Fake) error { return migrateBetween(f, df, name, o) })
	})
}
