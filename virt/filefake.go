package virt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/filelock"
)

// FileScheme is the URI scheme of a FileConn: vgpu-fake:///ABSOLUTE/PATH.json.
const FileScheme = "vgpu-fake"

// FileConn is a Conn that keeps the Fake's domains, pools and volume names in a JSON file, so
// separate vgpu-host processes (apply, then destroy) see one libvirt. It runs no guest and
// validates domain XML only as libvirtxml parses it. It is for hosts and labs without
// libvirtd: the real-kernel lab binds real devices through apply and destroy against it, and
// `make demo` plans against it. Each call loads the file, acts, and saves it under the one
// file lock.
type FileConn struct {
	path string
}

var _ Conn = (*FileConn)(nil)

// fileState is the file's content.
type fileState struct {
	Types   []string                     `json:"virt_types"`
	Domains map[string]fileDomain        `json:"domains"`
	Pools   map[string]string            `json:"pools"`
	Volumes map[string]map[string]Volume `json:"volumes"`
}

type fileDomain struct {
	XML   string `json:"xml"`
	State State  `json:"state"`
	// Live is the running guest's XML after a hotplug; empty when it is XML.
	Live string `json:"live,omitempty"`
}

// OpenFile returns the FileConn of uri (vgpu-fake:///PATH), creating nothing until the first
// change.
func OpenFile(uri string) (*FileConn, error) {
	p, ok := strings.CutPrefix(uri, FileScheme+"://")
	if !ok || !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return nil, fmt.Errorf("libvirt URI %q: want %s:///ABSOLUTE/PATH.json: %w", uri, FileScheme, host.ErrInvalid)
	}
	return &FileConn{path: p}, nil
}

// IsFileURI reports whether uri names a FileConn.
func IsFileURI(uri string) bool { return strings.HasPrefix(uri, FileScheme+"://") }

// with runs fn over a Fake holding the file's state, saving it afterwards when write is set.
func (c *FileConn) with(write bool, fn func(f *Fake) error) error {
	mode := filelock.Shared
	if write {
		mode = filelock.Exclusive
	}
	return filelock.With(filelock.Sibling(c.path), mode, filelock.DefaultTimeout, func() error {
		f, err := c.load()
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
		if !write {
			return nil
		}
		return c.save(f)
	})
}

func (c *FileConn) load() (*Fake, error) {
	f := NewFake("qemu")
	b, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.path, err)
	}
	var st fileState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w (remove it to start with an empty fake libvirt)", c.path, err)
	}
	if len(st.Types) > 0 {
		f.types = st.Types
	}
	for n, d := range st.Domains {
		f.doms[n] = &fakeDomain{xml: d.XML, state: d.State, live: d.Live}
	}
	for n, p := range st.Pools {
		f.pools[n] = p
	}
	for p, vs := range st.Volumes {
		f.vols[p] = map[string]*FakeVolume{}
		for n, v := range vs {
			f.vols[p][n] = &FakeVolume{Volume: v}
		}
	}
	return f, nil
}

func (c *FileConn) save(f *Fake) error {
	st := fileState{Types: f.types, Domains: map[string]fileDomain{}, Pools: f.pools, Volumes: map[string]map[string]Volume{}}
	for n, d := range f.doms {
		st.Domains[n] = fileDomain{XML: d.xml, State: d.state, Live: d.live}
	}
	for p, vs := range f.vols {
		st.Volumes[p] = map[string]Volume{}
		for n, v := range vs {
			st.Volumes[p][n] = v.Volume
		}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return host.WriteFileAtomic(c.path, b, 0o600)
}

// URI returns vgpu-fake:///PATH.
func (c *FileConn) URI() string { return FileScheme + "://" + c.path }

// Close does nothing.
func (c *FileConn) Close() error { return nil }

// VirtTypes returns the recorded types (qemu by default).
func (c *FileConn) VirtTypes(ctx context.Context) (out []string, err error) {
	err = c.with(false, func(f *Fake) error { out, err = f.VirtTypes(ctx); return err })
	return out, err
}

// Define implements Conn.
func (c *FileConn) Define(ctx context.Context, xml string) (name string, err error) {
	err = c.with(true, func(f *Fake) error { name, err = f.Define(ctx, xml); return err })
	return name, err
}

// Start implements Conn.
func (c *FileConn) Start(ctx context.Context, name string) error {
	return c.with(true, func(f *Fake) error { return f.Start(ctx, name) })
}

// Shutdown implements Conn.
func (c *FileConn) Shutdown(ctx context.Context, name string) error {
	return c.with(true, func(f *Fake) error { return f.Shutdown(ctx, name) })
}

// Destroy implements Conn.
func (c *FileConn) Destroy(ctx context.Context, name string) error {
	return c.with(true, func(f *Fake) error { return f.Destroy(ctx, name) })
}

// Undefine implements Conn.
func (c *FileConn) Undefine(ctx context.Context, name string) error {
	return c.with(true, func(f *Fake) error { return f.Undefine(ctx, name) })
}

// State implements Conn.
func (c *FileConn) State(ctx context.Context, name string) (st State, err error) {
	err = c.with(false, func(f *Fake) error { st, err = f.State(ctx, name); return err })
	return st, err
}

// DomainXML implements Conn.
func (c *FileConn) DomainXML(ctx context.Context, name string) (x string, err error) {
	err = c.with(false, func(f *Fake) error { x, err = f.DomainXML(ctx, name); return err })
	return x, err
}

// ListDomainXMLs implements Conn.
func (c *FileConn) ListDomainXMLs(ctx context.Context) (m map[string]string, err error) {
	err = c.with(false, func(f *Fake) error { m, err = f.ListDomainXMLs(ctx); return err })
	return m, err
}

// QMP has no guest to ask.
func (c *FileConn) QMP(_ context.Context, name, _ string) (string, error) {
	return "", fmt.Errorf("QMP to domain %s: %s runs no guests", name, c.URI())
}

// EnsureDirPool implements Conn.
func (c *FileConn) EnsureDirPool(ctx context.Context, name, path string) error {
	return c.with(true, func(f *Fake) error { return f.EnsureDirPool(ctx, name, path) })
}

// CreateVolume implements Conn (the volume is recorded, no file is made).
func (c *FileConn) CreateVolume(ctx context.Context, pool string, v Volume) error {
	return c.with(true, func(f *Fake) error { return f.CreateVolume(ctx, pool, v) })
}

// UploadVolume implements Conn (the volume is recorded, its data is not kept).
func (c *FileConn) UploadVolume(ctx context.Context, pool, name string, data []byte) error {
	return c.with(true, func(f *Fake) error { return f.UploadVolume(ctx, pool, name, data) })
}

// VolumePath implements Conn.
func (c *FileConn) VolumePath(ctx context.Context, pool, name string) (p string, err error) {
	err = c.with(false, func(f *Fake) error { p, err = f.VolumePath(ctx, pool, name); return err })
	return p, err
}

// DeleteVolume implements Conn.
func (c *FileConn) DeleteVolume(ctx context.Context, pool, name string) error {
	return c.with(true, func(f *Fake) error { return f.DeleteVolume(ctx, pool, name) })
}

// AttachDevice implements Conn.
func (c *FileConn) AttachDevice(ctx context.Context, name, deviceXML string, scope DeviceScope) error {
	return c.with(true, func(f *Fake) error { return f.AttachDevice(ctx, name, deviceXML, scope) })
}

// DetachDevice implements Conn: the file's guests release a device at once.
func (c *FileConn) DetachDevice(ctx context.Context, name, deviceXML string, scope DeviceScope) error {
	return c.with(true, func(f *Fake) error { return f.DetachDevice(ctx, name, deviceXML, scope) })
}

// LiveDomainXML implements Conn.
func (c *FileConn) LiveDomainXML(ctx context.Context, name string) (x string, err error) {
	err = c.with(false, func(f *Fake) error { x, err = f.LiveDomainXML(ctx, name); return err })
	return x, err
}
