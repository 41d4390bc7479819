// Package direct is vgpu-host's pure-Go adapter over libvirt: the virt.Conn that speaks
// libvirtd's RPC protocol over its unix socket itself (github.com/digitalocean/go-libvirt),
// with no libvirt shared library and no helper process. It serves the URI nearly every host
// uses, qemu:///system; for any other URI (the test driver, ssh, tls, a session daemon) and
// for what this package cannot do (SASL authentication), vgpu-host goes through the helper
// vgpu-host-libvirt and libvirt's own client (package virt/remote).
//
// Why a second adapter: a command that talks to libvirt once (apply, destroy, status) spent
// more time loading libvirt.so and its sixty libraries in the helper than libvirtd spent
// defining the domain. Both adapters map libvirt's answers through the same functions
// (virt.LibvirtError, virt.StateOf) and pass the same conformance test against a real
// libvirtd (virt/virttest).
package direct

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-host/vgpu-host/virt"
)

// The system daemon's sockets, as libvirt's client picks them (src/remote/remote_sockets.c,
// mode "auto"): the QEMU driver's own daemon (virtqemud, modular) when its socket exists,
// else the monolithic libvirtd's.
const (
	modularSocket = "/var/run/libvirt/virtqemud-sock"
	legacySocket  = "/var/run/libvirt/libvirt-sock"
)

// Socket returns the unix socket this package would connect to for uri, and whether it
// serves uri at all: qemu:///system or qemu+unix:///system, with at most a socket=PATH query
// (libvirt's own way to name another socket). Any other URI is libvirt's client's business.
func Socket(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "qemu" && u.Scheme != "qemu+unix") || u.Host != "" || u.User != nil ||
		u.Path != "/system" || u.Fragment != "" {
		return "", false
	}
	q := u.Query()
	for k := range q {
		if k != "socket" {
			return "", false
		}
	}
	if s := q["socket"]; len(s) > 0 {
		if len(s) != 1 || s[0] == "" {
			return "", false
		}
		return s[0], true
	}
	if _, err := os.Stat(modularSocket); err == nil {
		return modularSocket, true
	}
	return legacySocket, true
}

// Conn is a virt.Conn over one connection to libvirtd's socket.
type Conn struct {
	uri string
	l   *libvirt.Libvirt
	// lost is set once reading libvirtd's socket failed: go-libvirt then answers calls still
	// waiting with an empty reply, which must not read as success.
	lost *atomic.Bool
}

var _ virt.Conn = (*Conn)(nil)

// Open connects to the libvirtd that serves uri (see Socket). It fails with a plain error
// (the caller then goes through libvirt's own client, whose message names the cause) when
// the URI is not one it serves, the socket does not answer, or libvirtd asks for an
// authentication it does not speak.
func Open(uri string) (*Conn, error) {
	path, ok := Socket(uri)
	if !ok {
		return nil, fmt.Errorf("connect to libvirt at %s: not a local system URI", uri)
	}
	lost := new(atomic.Bool)
	l := libvirt.NewWithDialer(dialer{path: path, lost: lost})
	if err := l.ConnectToURI(libvirt.ConnectURI("qemu:///system")); err != nil {
		return nil, fmt.Errorf("connect to libvirt at %s (socket %s): %w", uri, path, err)
	}
	return &Conn{uri: uri, l: l, lost: lost}, nil
}

// dialer connects to path and notes in lost when reading from it fails.
type dialer struct {
	path string
	lost *atomic.Bool
}

// Dial implements go-libvirt's socket.Dialer.
func (d dialer) Dial() (net.Conn, error) {
	c, err := net.DialTimeout("unix", d.path, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return watched{Conn: c, lost: d.lost}, nil
}

// watched is a net.Conn that sets lost on its first failed read, before go-libvirt's reader
// sees the error and releases the calls waiting for replies.
type watched struct {
	net.Conn
	lost *atomic.Bool
}

func (w watched) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil {
		w.lost.Store(true)
	}
	return n, err
}

// URI returns the connection URI.
func (c *Conn) URI() string { return c.uri }

// Close ends the connection.
func (c *Conn) Close() error {
	if c.lost.Load() {
		return nil
	}
	if err := c.l.Disconnect(); err != nil {
		return fmt.Errorf("close libvirt connection %s: %w", c.uri, err)
	}
	return nil
}

// err maps a go-libvirt error, or a "success" after the connection broke, through
// virt.LibvirtError.
func (c *Conn) err(err error, what string) error {
	var le libvirt.Error
	switch {
	case errors.As(err, &le):
		return virt.LibvirtError(what, int(le.Code), le.Message, false)
	case c.lost.Load():
		// Checked after a libvirt error: libvirtd's own answer stands even if the connection
		// broke after it.
		if err == nil {
			err = errors.New("libvirtd closed the connection")
		}
		return fmt.Errorf("%s: %w: %v", what, virt.ErrConnection, err)
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		return fmt.Errorf("%s: %w: %v", what, virt.ErrConnection, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// code returns libvirt's error number and message in err, if it holds one.
func code(err error) (int, string) {
	var le libvirt.Error
	if errors.As(err, &le) {
		return int(le.Code), le.Message
	}
	return 0, ""
}

// VirtTypes asks libvirt's domain capabilities which domain types work for x86_64 guests.
func (c *Conn) VirtTypes(context.Context) ([]string, error) {
	var out []string
	var last error
	for _, t := range []string{"kvm", "qemu"} {
		_, err := c.l.ConnectGetDomainCapabilities(nil, libvirt.OptString{"x86_64"}, nil, libvirt.OptString{t}, 0)
		if err = c.err(err, "domain capabilities for x86_64"); err != nil {
			if errors.Is(err, virt.ErrConnection) {
				return nil, err
			}
			last = err
			continue
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, last
	}
	return out, nil
}

func (c *Conn) domain(name string) (libvirt.Domain, error) {
	d, err := c.l.DomainLookupByName(name)
	return d, c.err(err, "look up domain "+name)
}

// Define defines a persistent domain; libvirtd checks it against its schema
// (VIR_DOMAIN_DEFINE_VALIDATE).
func (c *Conn) Define(_ context.Context, xml string) (string, error) {
	d, err := c.l.DomainDefineXMLFlags(xml, libvirt.DomainDefineValidate)
	if err := c.err(err, "define domain"); err != nil {
		return "", err
	}
	return d.Name, nil
}

// Start starts the domain unless it runs already.
func (c *Conn) Start(_ context.Context, name string) error {
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	if active, err := c.l.DomainIsActive(d); err == nil && active == 1 && !c.lost.Load() {
		return nil
	}
	return virt.WithSwtpmHint(c.err(c.l.DomainCreate(d), "start domain "+name))
}

// Shutdown asks the guest to power off.
func (c *Conn) Shutdown(_ context.Context, name string) error {
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	return c.err(c.l.DomainShutdown(d), "shut down domain "+name)
}

// Destroy stops the domain at once; a stopped domain is left as it is.
func (c *Conn) Destroy(_ context.Context, name string) error {
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	if active, err := c.l.DomainIsActive(d); err == nil && active == 0 && !c.lost.Load() {
		return nil
	}
	err = c.err(c.l.DomainDestroy(d), "destroy domain "+name)
	if err != nil && !errors.Is(err, virt.ErrConnection) {
		// A start in flight when its client died is aborted by libvirtd: the domain may have
		// stopped by itself between the two calls. That is what we want.
		if active, aerr := c.l.DomainIsActive(d); aerr == nil && active == 0 && !c.lost.Load() {
			return nil
		}
	}
	return err
}

// Undefine removes the persistent definition with its NVRAM, managed save and snapshot and
// checkpoint metadata.
func (c *Conn) Undefine(_ context.Context, name string) error {
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	return c.err(c.l.DomainUndefineFlags(d, libvirt.DomainUndefineNvram|libvirt.DomainUndefineManagedSave|
		libvirt.DomainUndefineSnapshotsMetadata|libvirt.DomainUndefineCheckpointsMetadata), "undefine domain "+name)
}

// State returns the domain's run state.
func (c *Conn) State(_ context.Context, name string) (virt.State, error) {
	d, err := c.domain(name)
	if err != nil {
		return "", err
	}
	s, _, err := c.l.DomainGetState(d, 0)
	if err := c.err(err, "state of domain "+name); err != nil {
		return "", err
	}
	return virt.StateOf(int(s)), nil
}

// DomainXML returns the persistent XML of the domain.
func (c *Conn) DomainXML(_ context.Context, name string) (string, error) {
	d, err := c.domain(name)
	if err != nil {
		return "", err
	}
	x, err := c.l.DomainGetXMLDesc(d, libvirt.DomainXMLInactive)
	return x, c.err(err, "XML of domain "+name)
}

// ListDomainXMLs returns every domain's live XML (inactive XML for stopped domains), by name.
func (c *Conn) ListDomainXMLs(context.Context) (map[string]string, error) {
	doms, _, err := c.l.ConnectListAllDomains(1, 0)
	if err := c.err(err, "list domains"); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(doms))
	for _, d := range doms {
		x, err := c.l.DomainGetXMLDesc(d, 0)
		if err := c.err(err, "XML of domain "+d.Name); err != nil {
			if errors.Is(err, virt.ErrConnection) {
				return nil, err
			}
			continue // the domain went away while we listed
		}
		out[d.Name] = x
	}
	return out, nil
}

// QMP passes a QMP command through libvirt to the domain's QEMU monitor.
func (c *Conn) QMP(_ context.Context, name, command string) (string, error) {
	d, err := c.domain(name)
	if err != nil {
		return "", err
	}
	out, err := c.l.QEMUDomainMonitorCommand(d, command, 0)
	if err := c.err(err, "QMP to domain "+name); err != nil {
		return "", err
	}
	return out, nil
}

// EnsureDirPool defines, builds and starts a dir pool at path unless one named name exists;
// an existing inactive pool is started.
func (c *Conn) EnsureDirPool(_ context.Context, name, path string) error {
	p, err := c.l.StoragePoolLookupByName(name)
	if err := c.err(err, "look up storage pool "+name); err != nil {
		if !errors.Is(err, virt.ErrNoPool) {
			return err
		}
		if err := os.MkdirAll(path, 0o711); err != nil {
			return fmt.Errorf("create storage pool directory %s: %w", path, err)
		}
		x, err := virt.DirPoolXML(name, path)
		if err != nil {
			return err
		}
		p, err = c.l.StoragePoolDefineXML(x, 0)
		if err != nil {
			// Another process may have defined it between our lookup and define.
			p2, err2 := c.l.StoragePoolLookupByName(name)
			if err2 != nil {
				return c.err(err, "define storage pool "+name)
			}
			p = p2
		}
		_ = c.l.StoragePoolSetAutostart(p, 1)
	}
	active, err := c.l.StoragePoolIsActive(p)
	if err := c.err(err, "storage pool "+name); err != nil {
		return err
	}
	if active == 0 {
		if err := c.l.StoragePoolCreate(p, libvirt.StoragePoolCreateWithBuild); err != nil {
			if a, _ := c.l.StoragePoolIsActive(p); a == 0 {
				return c.err(err, "start storage pool "+name)
			}
		}
	}
	return nil
}

func (c *Conn) pool(name string) (libvirt.StoragePool, error) {
	p, err := c.l.StoragePoolLookupByName(name)
	if err := c.err(err, "look up storage pool "+name); err != nil {
		return p, err
	}
	// A dir pool only sees files created behind its back after a refresh.
	_ = c.l.StoragePoolRefresh(p, 0)
	return p, nil
}

func (c *Conn) volume(pool, name string) (libvirt.StorageVol, error) {
	p, err := c.pool(pool)
	if err != nil {
		return libvirt.StorageVol{}, err
	}
	v, err := c.l.StorageVolLookupByName(p, name)
	return v, c.err(err, fmt.Sprintf("look up volume %s in pool %s", name, pool))
}

// CreateVolume creates v in pool (a qcow2 overlay when v.BackingPath is set).
func (c *Conn) CreateVolume(_ context.Context, pool string, v virt.Volume) error {
	p, err := c.pool(pool)
	if err != nil {
		return err
	}
	x, err := virt.VolumeXML(v)
	if err != nil {
		return fmt.Errorf("volume %s XML: %w", v.Name, err)
	}
	_, err = c.l.StorageVolCreateXML(p, x, 0)
	return c.err(err, fmt.Sprintf("create volume %s in pool %s", v.Name, pool))
}

// UploadVolume creates a raw volume of len(data) bytes (replacing one of the same name) and
// streams data into it.
func (c *Conn) UploadVolume(_ context.Context, pool, name string, data []byte) error {
	p, err := c.pool(pool)
	if err != nil {
		return err
	}
	if old, err := c.l.StorageVolLookupByName(p, name); err == nil {
		if err := c.l.StorageVolDelete(old, 0); err != nil {
			return c.err(err, fmt.Sprintf("replace volume %s in pool %s", name, pool))
		}
	}
	x, err := virt.VolumeXML(virt.Volume{Name: name, Format: "raw", Capacity: uint64(len(data))})
	if err != nil {
		return fmt.Errorf("volume %s XML: %w", name, err)
	}
	vol, err := c.l.StorageVolCreateXML(p, x, 0)
	if err := c.err(err, fmt.Sprintf("create volume %s in pool %s", name, pool)); err != nil {
		return err
	}
	return c.err(c.l.StorageVolUpload(vol, bytes.NewReader(data), 0, uint64(len(data)), 0), "upload volume "+name)
}

// VolumePath returns the file of a volume.
func (c *Conn) VolumePath(_ context.Context, pool, name string) (string, error) {
	v, err := c.volume(pool, name)
	if err != nil {
		return "", err
	}
	path, err := c.l.StorageVolGetPath(v)
	return path, c.err(err, "path of volume "+name)
}

// DeleteVolume deletes a volume from pool. A volume libvirtd is still allocating (its creator
// was killed mid-call; libvirtd finishes the job) is waited for, as long as ctx allows and at
// most a minute.
func (c *Conn) DeleteVolume(ctx context.Context, pool, name string) error {
	v, err := c.volume(pool, name)
	if err != nil {
		return err
	}
	err = virt.DeleteAllocating(ctx, func() (int, string, error) {
		err := c.l.StorageVolDelete(v, 0)
		n, msg := code(err)
		return n, msg, err
	})
	return c.err(err, fmt.Sprintf("delete volume %s from pool %s", name, pool))
}
