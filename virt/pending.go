package virt

import "context"

// Pending is a Conn being opened in the background: a command starts the connection and
// reads its spec and the host meanwhile. Every call waits for the open to end, then goes to
// the opened Conn, or returns the open's error.
type Pending struct {
	uri  string
	done chan struct{}
	c    Conn
	err  error
}

var _ Conn = (*Pending)(nil)

// OpenAsync starts open in the background and returns at once.
func OpenAsync(uri string, open func() (Conn, error)) *Pending {
	p := &Pending{uri: uri, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.c, p.err = open()
	}()
	return p
}

// Opened waits until the connection is open and returns why it could not be, or ctx's error.
func (p *Pending) Opened(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// conn waits for the open; every method starts with it.
func (p *Pending) conn(ctx context.Context) (Conn, error) {
	if err := p.Opened(ctx); err != nil {
		return nil, err
	}
	return p.c, nil
}

// URI returns the connection URI.
func (p *Pending) URI() string { return p.uri }

// Close waits for the open and closes what it opened.
func (p *Pending) Close() error {
	<-p.done
	if p.err != nil {
		return nil
	}
	return p.c.Close()
}

// VirtTypes implements Conn.
func (p *Pending) VirtTypes(ctx context.Context) ([]string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return nil, err
	}
	return c.VirtTypes(ctx)
}

// Define implements Conn.
func (p *Pending) Define(ctx context.Context, xml string) (string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	return c.Define(ctx, xml)
}

// Start implements Conn.
func (p *Pending) Start(ctx context.Context, name string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.Start(ctx, name)
}

// Shutdown implements Conn.
func (p *Pending) Shutdown(ctx context.Context, name string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.Shutdown(ctx, name)
}

// Destroy implements Conn.
func (p *Pending) Destroy(ctx context.Context, name string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.Destroy(ctx, name)
}

// Undefine implements Conn.
func (p *Pending) Undefine(ctx context.Context, name string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.Undefine(ctx, name)
}

// State implements Conn.
func (p *Pending) State(ctx context.Context, name string) (State, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	return c.State(ctx, name)
}

// DomainXML implements Conn.
func (p *Pending) DomainXML(ctx context.Context, name string) (string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	return c.DomainXML(ctx, name)
}

// ListDomainXMLs implements Conn.
func (p *Pending) ListDomainXMLs(ctx context.Context) (map[string]string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return nil, err
	}
	return c.ListDomainXMLs(ctx)
}

// QMP implements Conn.
func (p *Pending) QMP(ctx context.Context, name, command string) (string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	return c.QMP(ctx, name, command)
}

// EnsureDirPool implements Conn.
func (p *Pending) EnsureDirPool(ctx context.Context, name, path string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.EnsureDirPool(ctx, name, path)
}

// CreateVolume implements Conn.
func (p *Pending) CreateVolume(ctx context.Context, pool string, v Volume) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.CreateVolume(ctx, pool, v)
}

// UploadVolume implements Conn.
func (p *Pending) UploadVolume(ctx context.Context, pool, name string, data []byte) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.UploadVolume(ctx, pool, name, data)
}

// VolumePath implements Conn.
func (p *Pending) VolumePath(ctx context.Context, pool, name string) (string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	return c.VolumePath(ctx, pool, name)
}

// DeleteVolume implements Conn.
func (p *Pending) DeleteVolume(ctx context.Context, pool, name string) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.DeleteVolume(ctx, pool, name)
}

// AttachDevice implements Conn.
func (p *Pending) AttachDevice(ctx context.Context, name, deviceXML string, scope DeviceScope) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.AttachDevice(ctx, name, deviceXML, scope)
}

// DetachDevice implements Conn.
func (p *Pending) DetachDevice(ctx context.Context, name, deviceXML string, scope DeviceScope) error {
	c, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return c.DetachDevice(ctx, name, deviceXML, scope)
}

// LiveDomainXML implements Conn.
func (p *Pending) LiveDomainXML(ctx context.Context, name string) (string, error) {
	c, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	return c.LiveDomainXML(ctx, name)
}
