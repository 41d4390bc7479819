package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/vgpu-host/vgpu-host/virt"
)

// Wire argument types: the JSON of a request's args. Not an API.
type (
	// Empty is an argument or reply with nothing in it.
	Empty struct{}
	// OpenArgs opens the libvirt connection; LongLived is OpenOptions.LongLived.
	OpenArgs struct {
		URI       string
		LongLived bool `json:",omitempty"`
	}
	// NameArgs names a domain.
	NameArgs struct{ Name string }
	// XMLArgs carries domain XML.
	XMLArgs struct{ XML string }
	// QMPArgs carries a QMP command for a domain.
	QMPArgs struct{ Name, Command string }
	// PoolArgs names a directory pool and its path.
	PoolArgs struct{ Name, Path string }
	// VolumeArgs names a volume in a pool, with what to create or upload.
	VolumeArgs struct {
		Pool   string
		Volume virt.Volume
		Data   []byte
	}
)

// Server is the helper's side: it opens the real connection on the client's Open and
// forwards every call to it.
type Server struct {
	open          func(uri string) (virt.Conn, error)
	prepareDefine func()
	conn          virt.Conn

	evMu sync.Mutex
	ev   *events // the domain-event subscription, if any (events.go)
}

// Serve answers one client on rwc until it hangs up. open makes the real connection (the
// helper passes the libvirt adapter's Open; tests pass a fake).
func Serve(open func(uri string) (virt.Conn, error), rwc io.ReadWriteCloser) error {
	return ServeBackend(Backend{Open: open}, rwc)
}

// Backend is what a server forwards to.
type Backend struct {
	// Open makes the real connection.
	Open func(uri string) (virt.Conn, error)
	// PrepareDefine, when set, runs in its own goroutine when a client opens a long-lived
	// connection (OpenOptions.LongLived): the helper compiles libvirt's domain schema while
	// libvirt connects, and checks domains against it from then on.
	PrepareDefine func()
}

// ServeBackend is Serve with the whole Backend.
func ServeBackend(b Backend, rwc io.ReadWriteCloser) error {
	srv := &Server{open: b.Open, prepareDefine: b.PrepareDefine}
	serveRPC(srv, rwc, srv.endEvents)
	_ = rwc.Close() // the helper's stdout: the client's reader ends
	if srv.conn != nil {
		return srv.conn.Close()
	}
	return nil
}

func (s *Server) c() (virt.Conn, error) {
	if s.conn == nil {
		return nil, errors.New("libvirt connection not open")
	}
	return s.conn, nil
}

var bg = context.Background()

// Open opens the libvirt connection.
func (s *Server) Open(a OpenArgs, _ *Empty) error {
	if s.conn != nil {
		return nil
	}
	if a.LongLived && s.prepareDefine != nil {
		go s.prepareDefine()
	}
	c, err := s.open(a.URI)
	if err != nil {
		return toWire(err)
	}
	s.conn = c
	return nil
}

// Close closes the libvirt connection.
func (s *Server) Close(_ Empty, _ *Empty) error {
	s.endEvents()
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return toWire(err)
}

// VirtTypes forwards virt.Conn.VirtTypes.
func (s *Server) VirtTypes(_ Empty, r *[]string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.VirtTypes(bg); return })
}

// Define forwards virt.Conn.Define.
func (s *Server) Define(a XMLArgs, r *string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.Define(bg, a.XML); return })
}

// Start forwards virt.Conn.Start.
func (s *Server) Start(a NameArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.Start(bg, a.Name) })
}

// Shutdown forwards virt.Conn.Shutdown.
func (s *Server) Shutdown(a NameArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.Shutdown(bg, a.Name) })
}

// Destroy forwards virt.Conn.Destroy.
func (s *Server) Destroy(a NameArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.Destroy(bg, a.Name) })
}

// Undefine forwards virt.Conn.Undefine.
func (s *Server) Undefine(a NameArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.Undefine(bg, a.Name) })
}

// State forwards virt.Conn.State.
func (s *Server) State(a NameArgs, r *virt.State) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.State(bg, a.Name); return })
}

// DomainXML forwards virt.Conn.DomainXML.
func (s *Server) DomainXML(a NameArgs, r *string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.DomainXML(bg, a.Name); return })
}

// ListDomainXMLs forwards virt.Conn.ListDomainXMLs.
func (s *Server) ListDomainXMLs(_ Empty, r *map[string]string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.ListDomainXMLs(bg); return })
}

// QMP forwards virt.Conn.QMP.
func (s *Server) QMP(a QMPArgs, r *string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.QMP(bg, a.Name, a.Command); return })
}

// EnsureDirPool forwards virt.Conn.EnsureDirPool.
func (s *Server) EnsureDirPool(a PoolArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.EnsureDirPool(bg, a.Name, a.Path) })
}

// CreateVolume forwards virt.Conn.CreateVolume.
func (s *Server) CreateVolume(a VolumeArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.CreateVolume(bg, a.Pool, a.Volume) })
}

// UploadVolume forwards virt.Conn.UploadVolume.
func (s *Server) UploadVolume(a VolumeArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.UploadVolume(bg, a.Pool, a.Volume.Name, a.Data) })
}

// VolumePath forwards virt.Conn.VolumePath.
func (s *Server) VolumePath(a VolumeArgs, r *string) error {
	return do(s, func(c virt.Conn) (err error) { *r, err = c.VolumePath(bg, a.Pool, a.Volume.Name); return })
}

// DeleteVolume forwards virt.Conn.DeleteVolume.
func (s *Server) DeleteVolume(a VolumeArgs, _ *Empty) error {
	return do(s, func(c virt.Conn) error { return c.DeleteVolume(bg, a.Pool, a.Volume.Name) })
}

func do(s *Server, f func(virt.Conn) error) error {
	c, err := s.c()
	if err != nil {
		return err
	}
	return toWire(f(c))
}

// Errors cross the pipe as "KIND\x1fMESSAGE" so the client can restore the sentinel.
const sep = "\x1f"

// wireKind is an error class that keeps its sentinel across the pipe.
type wireKind struct {
	name string
	err  error
}

// kinds are the error classes, a function: a package-level table of other packages' errors
// is filled in by the package's initialiser, at every start of every binary that links it.
func kinds() []wireKind {
	return []wireKind{
		{"no-domain", virt.ErrNoDomain},
		{"no-volume", virt.ErrNoVolume},
		{"no-pool", virt.ErrNoPool},
		{"volume-exists", virt.ErrVolumeExists},
		{"connection", virt.ErrConnection},
		{"not-hotpluggable", virt.ErrDeviceNotHotpluggable},
		{"canceled", context.Canceled},
		{"deadline", context.DeadlineExceeded},
	}
}

func toWire(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range kinds() {
		if errors.Is(err, k.err) {
			return errors.New(k.name + sep + err.Error())
		}
	}
	return errors.New("error" + sep + err.Error())
}

// wireError is an error that came back from the helper, with its sentinel.
type wireError struct {
	msg  string
	kind error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.kind }

func fromWire(err error) error {
	if err == nil {
		return nil
	}
	var se serverError
	if !errors.As(err, &se) {
		// The pipe broke: the helper died or was killed.
		return fmt.Errorf("libvirt helper %s stopped answering: %w: %w", HelperName, virt.ErrConnection, err)
	}
	kind, msg, ok := strings.Cut(string(se), sep)
	if !ok {
		return errors.New(string(se))
	}
	for _, k := range kinds() {
		if k.name == kind {
			return &wireError{msg: msg, kind: k.err}
		}
	}
	return &wireError{msg: msg}
}
