// Package remote runs the libvirt adapter in a helper process, vgpu-host-libvirt, and speaks
// to it over the helper's stdin and stdout (one JSON request or answer per line; wire.go).
//
// Why: libvirt.org/go/libvirt links libvirt through cgo, and its package init loads
// libvirt.so and its ~60 shared libraries in every process that imports it (11 ms per start
// on these machines, ~180 ms under TCG), although most vgpu-host commands (inspect, check,
// bind, vf, mdev, render) never talk to libvirt. Keeping the binding in a helper makes the
// vgpu-host binary pure Go and static: it starts in a couple of milliseconds, runs on hosts and
// in initramfs images without libvirt installed, and loads libvirt only when a command needs
// it (apply, destroy, status, verify, image export, and mdev remove's in-use check). The
// helper serves exactly the narrow virt.Conn interface; errors keep their sentinels
// (virt.ErrNoDomain, ErrNoVolume, ErrNoPool) across the pipe.
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt"
)

// HelperName is the helper binary's file name; it is looked for next to the vgpu-host
// executable, then in PATH.
const HelperName = "vgpu-host-libvirt"

// EnvHelper overrides where the helper is (a path to the binary).
const EnvHelper = "VGPU_HOST_LIBVIRT_HELPER"

// ErrNoHelper is returned (wrapped in host.ErrUnsupported) when the helper cannot be found.
var ErrNoHelper = errors.New(HelperName + " not found")

// HelperPath finds the helper: $VGPU_HOST_LIBVIRT_HELPER (if trustedHelper accepts it), then
// beside the running executable, then in PATH.
func HelperPath() (string, error) {
	return FindHelper(HelperName, EnvHelper, "libvirt support", ErrNoHelper)
}

// FindHelper finds a helper binary of vgpu-host by the rule every helper follows: the path in
// the environment variable env when set, then name beside the running executable, then name
// in PATH. When it is missing the error names what needs it (purpose), where it looked and the
// fix, and wraps notFound and host.ErrUnsupported. A path from env must pass trustedHelper;
// StartHelper checks it again on the descriptor it runs. A caller that runs the path itself
// runs what the path names by then: use OpenHelper and Helper.Command or Helper.Exec instead.
func FindHelper(name, env, purpose string, notFound error) (string, error) {
	return FindHelperEnv(os.Getenv, name, env, purpose, notFound)
}

// FindHelperEnv is FindHelper with env looked up by getenv instead of in this process's
// environment (mig/remote.Env: a test's own NVML helper, without the process-wide variable).
func FindHelperEnv(getenv func(string) string, name, env, purpose string, notFound error) (string, error) {
	p, isEnv, err := findHelper(getenv, name, env, purpose, notFound)
	if err != nil {
		return "", err
	}
	if isEnv {
		f, err := trustedHelper(p, env)
		if err != nil {
			return "", err
		}
		f.Close()
		fromEnv.Store(p, env)
	}
	return p, nil
}

// findHelper is FindHelperEnv without the trust check; isEnv says p came from env.
func findHelper(getenv func(string) string, name, env, purpose string, notFound error) (p string, isEnv bool, err error) {
	if p := getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", false, fmt.Errorf("%s=%s: %w: %w", env, p, notFound, host.ErrUnsupported)
		}
		return p, true, nil
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, false, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, false, nil
	}
	tried = append(tried, "PATH")
	return "", false, fmt.Errorf("%s: %w (looked in %s); install it beside vgpu-host (make build puts both in bin/) or set %s: %w",
		purpose, notFound, strings.Join(tried, ", "), env, host.ErrUnsupported)
}

// Open starts the helper and connects it to libvirt at uri ("" means virt.DefaultURI); it
// returns when the connection is open, or with the reason it could not be.
func Open(uri string) (virt.Conn, error) {
	c, err := Start(uri, OpenOptions{})
	if err != nil {
		return nil, err
	}
	if err := c.Opened(context.Background()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// OpenOptions say what the caller will do with a connection Start opens.
type OpenOptions struct {
	// LongLived: the connection lives long and defines many domains (the agent's). The helper
	// then compiles libvirt's domain schema once, in the background as the connection opens,
	// and checks every domain against it before defining it (well under a millisecond each).
	// A short-lived connection (one command) leaves the check to libvirtd
	// (VIR_DOMAIN_DEFINE_VALIDATE), which costs a define about 8 ms: compiling the schema
	// costs more than that, and it was on the critical path of every apply.
	LongLived bool
}

// Start starts the helper and asks it to connect to libvirt at uri ("" means
// virt.DefaultURI), and returns without waiting: loading libvirt in the helper (11 ms here,
// ~180 ms under TCG) and connecting overlap the caller's own work (reading the spec, scanning
// the host). The first call waits for the connection and returns its error if it could not be
// opened (Opened asks for it alone). A missing helper is reported at once.
func Start(uri string, o OpenOptions) (*Client, error) {
	if uri == "" {
		uri = virt.DefaultURI
	}
	h, err := OpenHelper(HelperName, EnvHelper, "libvirt support", ErrNoHelper)
	if err != nil {
		return nil, err
	}
	rwc, wait, err := h.Start()
	if err != nil {
		return nil, err
	}
	c := DialAsync(uri, rwc, o)
	c.wait = wait
	return c, nil
}

// pipe joins the helper's stdout (read) and stdin (write) into one connection.
type pipe struct {
	io.Reader
	io.WriteCloser
}

// Client is the virt.Conn that forwards every call to a server (the helper).
type Client struct {
	uri  string
	rpc  *rpcClient
	wait func() error
	// opening is the Open call in flight (DialAsync); every call waits for it first.
	opening *rpcCall

	closeOnce sync.Once
	closeErr  error
}

var _ virt.Conn = (*Client)(nil)

// Dial opens libvirt at uri on the server at the other end of rwc and waits for it. Tests
// use it on an in-process pipe.
func Dial(uri string, rwc io.ReadWriteCloser) (*Client, error) {
	c := DialAsync(uri, rwc, OpenOptions{})
	if err := c.Opened(context.Background()); err != nil {
		c.rpc.Close()
		return nil, err
	}
	return c, nil
}

// DialAsync asks the server at the other end of rwc to open libvirt at uri and returns at
// once; every call waits for the open first (Start uses it on the helper's pipes).
func DialAsync(uri string, rwc io.ReadWriteCloser, o OpenOptions) *Client {
	c := &Client{uri: uri, rpc: newRPCClient(rwc)}
	c.opening = c.rpc.Go("Open", OpenArgs{URI: uri, LongLived: o.LongLived}, &Empty{})
	return c
}

// Opened waits until the connection is open and returns why it could not be, or ctx's error.
func (c *Client) Opened(ctx context.Context) error {
	if c.opening == nil {
		return nil
	}
	select {
	case <-c.opening.done:
		return fromWire(c.opening.err)
	case <-ctx.Done():
		return fmt.Errorf("libvirt Open: %w", ctx.Err())
	}
}

// call makes one RPC, returning when it answers or ctx ends (the helper may then still finish
// the libvirt call), and turns the wire error back into one with its sentinel. It waits for
// the connection to open first: a call sent before the Open is answered would reach a helper
// that has no connection yet (the helper answers calls concurrently).
func (c *Client) call(ctx context.Context, method string, args, reply any) error {
	if err := c.Opened(ctx); err != nil {
		return err
	}
	call := c.rpc.Go(method, args, reply)
	select {
	case <-call.done:
		return fromWire(call.err)
	case <-ctx.Done():
		return fmt.Errorf("libvirt %s: %w", method, ctx.Err())
	}
}

// URI returns the connection URI.
func (c *Client) URI() string { return c.uri }

// Close closes the libvirt connection and stops the helper.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.Opened(context.Background()) == nil {
			c.closeErr = c.call(context.Background(), "Close", Empty{}, &Empty{})
		}
		_ = c.rpc.Close() // closes the helper's stdin: it exits
		if c.wait != nil {
			if err := c.wait(); err != nil && c.closeErr == nil {
				c.closeErr = fmt.Errorf("%s: %w", HelperName, err)
			}
		}
	})
	return c.closeErr
}

// VirtTypes implements virt.Conn.
func (c *Client) VirtTypes(ctx context.Context) ([]string, error) {
	var r []string
	return r, c.call(ctx, "VirtTypes", Empty{}, &r)
}

// Define implements virt.Conn.
func (c *Client) Define(ctx context.Context, xml string) (string, error) {
	var r string
	return r, c.call(ctx, "Define", XMLArgs{XML: xml}, &r)
}

// Start implements virt.Conn.
func (c *Client) Start(ctx context.Context, name string) error {
	return c.call(ctx, "Start", NameArgs{Name: name}, &Empty{})
}

// Shutdown implements virt.Conn.
func (c *Client) Shutdown(ctx context.Context, name string) error {
	return c.call(ctx, "Shutdown", NameArgs{Name: name}, &Empty{})
}

// Destroy implements virt.Conn.
func (c *Client) Destroy(ctx context.Context, name string) error {
	return c.call(ctx, "Destroy", NameArgs{Name: name}, &Empty{})
}

// Undefine implements virt.Conn.
func (c *Client) Undefine(ctx context.Context, name string) error {
	return c.call(ctx, "Undefine", NameArgs{Name: name}, &Empty{})
}

// State implements virt.Conn.
func (c *Client) State(ctx context.Context, name string) (virt.State, error) {
	var r virt.State
	return r, c.call(ctx, "State", NameArgs{Name: name}, &r)
}

// DomainXML implements virt.Conn.
func (c *Client) DomainXML(ctx context.Context, name string) (string, error) {
	var r string
	return r, c.call(ctx, "DomainXML", NameArgs{Name: name}, &r)
}

// ListDomainXMLs implements virt.Conn.
func (c *Client) ListDomainXMLs(ctx context.Context) (map[string]string, error) {
	r := map[string]string{}
	return r, c.call(ctx, "ListDomainXMLs", Empty{}, &r)
}

// QMP implements virt.Conn.
func (c *Client) QMP(ctx context.Context, name, command string) (string, error) {
	var r string
	return r, c.call(ctx, "QMP", QMPArgs{Name: name, Command: command}, &r)
}

// EnsureDirPool implements virt.Conn.
func (c *Client) EnsureDirPool(ctx context.Context, name, path string) error {
	return c.call(ctx, "EnsureDirPool", PoolArgs{Name: name, Path: path}, &Empty{})
}

// CreateVolume implements virt.Conn.
func (c *Client) CreateVolume(ctx context.Context, pool string, v virt.Volume) error {
	return c.call(ctx, "CreateVolume", VolumeArgs{Pool: pool, Volume: v}, &Empty{})
}

// UploadVolume implements virt.Conn.
func (c *Client) UploadVolume(ctx context.Context, pool, name string, data []byte) error {
	return c.call(ctx, "UploadVolume", VolumeArgs{Pool: pool, Volume: virt.Volume{Name: name}, Data: data}, &Empty{})
}

// VolumePath implements virt.Conn.
func (c *Client) VolumePath(ctx context.Context, pool, name string) (string, error) {
	var r string
	return r, c.call(ctx, "VolumePath", VolumeArgs{Pool: pool, Volume: virt.Volume{Name: name}}, &r)
}

// DeleteVolume implements virt.Conn.
func (c *Client) DeleteVolume(ctx context.Context, pool, name string) error {
	return c.call(ctx, "DeleteVolume", VolumeArgs{Pool: pool, Volume: virt.Volume{Name: name}}, &Empty{})
}
