// Package native is vgpu-host's in-process libvirt adapter: the virt.Conn implementation over
// the cgo binding libvirt.org/go/libvirt. Only the helper binary vgpu-host-libvirt (and tests)
// link it; vgpu-host reaches it through package virt/remote, so that the main binary does not
// load libvirt's shared libraries on every start.
package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-host/vgpu-host/virt"
)

// Libvirt is the virt.Conn that talks to a libvirt daemon.
type Libvirt struct {
	uri  string
	conn *libvirt.Connect

	subMu sync.Mutex
	subs  map[int]func() // event subscriptions, ended before the connection closes
	subN  int
}

var _ virt.Conn = (*Libvirt)(nil)

// Open connects to libvirt at uri ("" means virt.DefaultURI).
func Open(uri string) (*Libvirt, error) {
	if uri == "" {
		uri = virt.DefaultURI
	}
	startEventLoop()
	c, err := libvirt.NewConnect(uri)
	if err != nil {
		return nil, fmt.Errorf("connect to libvirt at %s: %w (is libvirtd running? try: libvirtd -d)", uri, err)
	}
	return &Libvirt{uri: uri, conn: c}, nil
}

// URI returns the connection URI.
func (l *Libvirt) URI() string { return l.uri }

// Close closes the connection.
func (l *Libvirt) Close() error {
	l.endSubscriptions()
	if _, err := l.conn.Close(); err != nil {
		return fmt.Errorf("close libvirt connection %s: %w", l.uri, err)
	}
	return nil
}

// lverr maps libvirt's errors to what virt.LibvirtError makes of them; an RPC failure
// ("Cannot recv data: Connection reset by peer", "client socket is closed") means libvirtd
// went away.
func lverr(err error, what string) error {
	if err == nil {
		return nil
	}
	var le libvirt.Error
	if errors.As(err, &le) {
		return virt.LibvirtError(what, int(le.Code), le.Message, le.Domain == libvirt.FROM_RPC)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// VirtTypes asks libvirt's domain capabilities which domain types work for x86_64 guests.
func (l *Libvirt) VirtTypes(context.Context) ([]string, error) {
	var out []string
	var last error
	for _, t := range []string{"kvm", "qemu"} {
		if _, err := l.conn.GetDomainCapabilities("", "x86_64", "", t, 0); err != nil {
			last = err
			continue
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, lverr(last, "domain capabilities for x86_64")
	}
	return out, nil
}

func (l *Libvirt) domain(name string) (*libvirt.Domain, error) {
	d, err := l.conn.LookupDomainByName(name)
	if err != nil {
		return nil, lverr(err, "look up domain "+name)
	}
	return d, nil
}

// Define defines a persistent domain whose XML passes libvirt's schema: checked here against
// the schema compiled once (ValidateDomain) in a process that asked for it (PrepareSchema: the
// agent's helper), else by libvirtd (VIR_DOMAIN_DEFINE_VALIDATE), as also when the schema file
// is not on this machine.
func (l *Libvirt) Define(_ context.Context, xml string) (string, error) {
	flags := libvirt.DOMAIN_DEFINE_VALIDATE
	if schemaHere.Load() {
		if ok, err := ValidateDomain(xml); err != nil {
			return "", fmt.Errorf("define domain: %w", err)
		} else if ok {
			flags = 0
		}
	}
	d, err := l.conn.DomainDefineXMLFlags(xml, flags)
	if err != nil {
		return "", lverr(err, "define domain")
	}
	defer d.Free()
	name, err := d.GetName()
	if err != nil {
		return "", lverr(err, "name of defined domain")
	}
	return name, nil
}

// Start starts the domain unless it runs already.
func (l *Libvirt) Start(ctx context.Context, name string) error {
	d, err := l.domain(name)
	if err != nil {
		return err
	}
	defer d.Free()
	if active, err := d.IsActive(); err == nil && active {
		return nil
	}
	return virt.WithSwtpmHint(lverr(d.Create(), "start domain "+name))
}

// Shutdown asks the guest to power off.
func (l *Libvirt) Shutdown(_ context.Context, name string) error {
	d, err := l.domain(name)
	if err != nil {
		return err
	}
	defer d.Free()
	return lverr(d.Shutdown(), "shut down domain "+name)
}

// Destroy stops the domain at once; a stopped domain is left as it is.
func (l *Libvirt) Destroy(_ context.Context, name string) error {
	d, err := l.domain(name)
	if err != nil {
		return err
	}
	defer d.Free()
	if active, err := d.IsActive(); err == nil && !active {
		return nil
	}
	err = d.Destroy()
	if err != nil {
		// A start in flight when its client died (kill -9) is aborted by libvirtd: between
		// IsActive and Destroy the domain may have stopped by itself. That is what we want.
		if active, aerr := d.IsActive(); aerr == nil && !active {
			return nil
		}
	}
	return lverr(err, "destroy domain "+name)
}

// Undefine removes the persistent definition with its NVRAM, managed save and snapshot metadata.
func (l *Libvirt) Undefine(_ context.Context, name string) error {
	d, err := l.domain(name)
	if err != nil {
		return err
	}
	defer d.Free()
	return lverr(d.UndefineFlags(libvirt.DOMAIN_UNDEFINE_NVRAM|libvirt.DOMAIN_UNDEFINE_MANAGED_SAVE|
		libvirt.DOMAIN_UNDEFINE_SNAPSHOTS_METADATA|libvirt.DOMAIN_UNDEFINE_CHECKPOINTS_METADATA), "undefine domain "+name)
}

// State returns the domain's run state.
func (l *Libvirt) State(_ context.Context, name string) (virt.State, error) {
	d, err := l.domain(name)
	if err != nil {
		return "", err
	}
	defer d.Free()
	s, _, err := d.GetState()
	if err != nil {
		return "", lverr(err, "state of domain "+name)
	}
	return virt.StateOf(int(s)), nil
}

// DomainXML returns the persistent XML of the domain.
func (l *Libvirt) DomainXML(_ context.Context, name string) (string, error) {
	d, err := l.domain(name)
	if err != nil {
		return "", err
	}
	defer d.Free()
	x, err := d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE)
	return x, lverr(err, "XML of domain "+name)
}

// ListDomainXMLs returns every domain's live XML (inactive XML for stopped domains), by name.
func (l *Libvirt) ListDomainXMLs(context.Context) (map[string]string, error) {
	doms, err := l.conn.ListAllDomains(0)
	if err != nil {
		return nil, lverr(err, "list domains")
	}
	out := make(map[string]string, len(doms))
	for i := range doms {
		d := &doms[i]
		name, nerr := d.GetName()
		x, xerr := d.GetXMLDesc(0)
		d.Free()
		if nerr != nil || xerr != nil {
			continue // the domain went away while we listed
		}
		out[name] = x
	}
	return out, nil
}

// QMP passes a QMP command through libvirt to the domain's QEMU monitor.
func (l *Libvirt) QMP(_ context.Context, name, command string) (string, error) {
	d, err := l.domain(name)
	if err != nil {
		return "", err
	}
	defer d.Free()
	out, err := d.QemuMonitorCommand(command, libvirt.DOMAIN_QEMU_MONITOR_COMMAND_DEFAULT)
	if err != nil {
		return "", lverr(err, "QMP to domain "+name)
	}
	return out, nil
}

// EnsureDirPool defines, builds and starts a dir pool at path unless one named name exists;
// an existing inactive pool is started.
func (l *Libvirt) EnsureDirPool(_ context.Context, name, path string) error {
	p, err := l.conn.LookupStoragePoolByName(name)
	if err != nil {
		if !errors.Is(lverr(err, ""), virt.ErrNoPool) {
			return lverr(err, "look up storage pool "+name)
		}
		if err := os.MkdirAll(path, 0o711); err != nil {
			return fmt.Errorf("create storage pool directory %s: %w", path, err)
		}
		x, merr := virt.DirPoolXML(name, path)
		if merr != nil {
			return merr
		}
		p, err = l.conn.StoragePoolDefineXML(x, 0)
		if err != nil {
			// Another process may have defined it between our lookup and define.
			if p2, err2 := l.conn.LookupStoragePoolByName(name); err2 == nil {
				p = p2
			} else {
				return lverr(err, "define storage pool "+name)
			}
		}
		_ = p.SetAutostart(true)
	}
	defer p.Free()
	active, err := p.IsActive()
	if err != nil {
		return lverr(err, "storage pool "+name)
	}
	if !active {
		if err := p.Create(libvirt.STORAGE_POOL_CREATE_WITH_BUILD); err != nil {
			if a, _ := p.IsActive(); !a {
				return lverr(err, "start storage pool "+name)
			}
		}
	}
	return nil
}

func (l *Libvirt) pool(name string) (*libvirt.StoragePool, error) {
	p, err := l.conn.LookupStoragePoolByName(name)
	if err != nil {
		return nil, lverr(err, "look up storage pool "+name)
	}
	// A dir pool only sees files created behind its back after a refresh.
	_ = p.Refresh(0)
	return p, nil
}

// CreateVolume creates v in pool (a qcow2 overlay when v.BackingPath is set).
func (l *Libvirt) CreateVolume(_ context.Context, pool string, v virt.Volume) error {
	p, err := l.pool(pool)
	if err != nil {
		return err
	}
	defer p.Free()
	x, err := virt.VolumeXML(v)
	if err != nil {
		return fmt.Errorf("volume %s XML: %w", v.Name, err)
	}
	vol, err := p.StorageVolCreateXML(x, 0)
	if err != nil {
		return lverr(err, fmt.Sprintf("create volume %s in pool %s", v.Name, pool))
	}
	return vol.Free()
}

// UploadVolume creates a raw volume of len(data) bytes (replacing one of the same name) and
// streams data into it.
func (l *Libvirt) UploadVolume(ctx context.Context, pool, name string, data []byte) error {
	p, err := l.pool(pool)
	if err != nil {
		return err
	}
	defer p.Free()
	if old, err := p.LookupStorageVolByName(name); err == nil {
		derr := old.Delete(0)
		old.Free()
		if derr != nil {
			return lverr(derr, fmt.Sprintf("replace volume %s in pool %s", name, pool))
		}
	}
	x, err := virt.VolumeXML(virt.Volume{Name: name, Format: "raw", Capacity: uint64(len(data))})
	if err != nil {
		return fmt.Errorf("volume %s XML: %w", name, err)
	}
	vol, err := p.StorageVolCreateXML(x, 0)
	if err != nil {
		return lverr(err, fmt.Sprintf("create volume %s in pool %s", name, pool))
	}
	defer vol.Free()
	st, err := l.conn.NewStream(0)
	if err != nil {
		return lverr(err, "open upload stream for "+name)
	}
	defer st.Free()
	if err := vol.Upload(st, 0, uint64(len(data)), 0); err != nil {
		return lverr(err, "upload volume "+name)
	}
	for off := 0; off < len(data); {
		n, err := st.Send(data[off:])
		if err != nil {
			_ = st.Abort()
			return lverr(err, "upload volume "+name)
		}
		off += n
	}
	return lverr(st.Finish(), "finish upload of volume "+name)
}

// VolumePath returns the file of a volume.
func (l *Libvirt) VolumePath(_ context.Context, pool, name string) (string, error) {
	p, err := l.pool(pool)
	if err != nil {
		return "", err
	}
	defer p.Free()
	v, err := p.LookupStorageVolByName(name)
	if err != nil {
		return "", lverr(err, fmt.Sprintf("look up volume %s in pool %s", name, pool))
	}
	defer v.Free()
	path, err := v.GetPath()
	return path, lverr(err, "path of volume "+name)
}

// DeleteVolume deletes a volume from pool. A volume libvirtd is still allocating (its creator
// was killed mid-call; libvirtd finishes the job) is waited for, as long as ctx allows and at
// most a minute.
func (l *Libvirt) DeleteVolume(ctx context.Context, pool, name string) error {
	p, err := l.pool(pool)
	if err != nil {
		return err
	}
	defer p.Free()
	v, err := p.LookupStorageVolByName(name)
	if err != nil {
		return lverr(err, fmt.Sprintf("look up volume %s in pool %s", name, pool))
	}
	defer v.Free()
	what := fmt.Sprintf("delete volume %s from pool %s", name, pool)
	err = virt.DeleteAllocating(ctx, func() (int, string, error) {
		err := v.Delete(0)
		var le libvirt.Error
		errors.As(err, &le)
		return int(le.Code), le.Message, err
	})
	return lverr(err, what)
}
