package agent

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// capListener admits connections by their peer (SO_PEERCRED, read once at accept): root's
// always; a non-root uid's while it holds fewer than perUID and all non-root uids together
// fewer than total. A connection over a cap is answered 503 and closed at once, so that a
// flood of idle or trickling connections holds a bounded number of descriptors, goroutines
// and buffers, and never keeps root from the agent.
type capListener struct {
	net.Listener
	perUID, total int
	log           *slog.Logger

	mu      sync.Mutex
	byUID   map[uint32]int
	n       int       // non-root connections open
	refused int       // since the last log line
	logged  time.Time // when the last refusal was logged
}

func newCapListener(ln net.Listener, perUID, total int, log *slog.Logger) *capListener {
	return &capListener{Listener: ln, perUID: perUID, total: total, log: log, byUID: map[uint32]int{}}
}

// unknownPeer is the peer of a connection whose credentials the kernel did not give: an
// unknown non-root caller.
var unknownPeer = Peer{UID: ^uint32(0), GID: ^uint32(0), PID: -1}

// Accept returns the next admitted connection, a *peerConn.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := peerCred(c)
		if err != nil {
			l.log.Warn("no peer credentials: the connection is treated as an unknown non-root caller", "err", err)
			p = unknownPeer
		}
		if p.UID == 0 {
			return &peerConn{Conn: c, peer: p}, nil
		}
		if why := l.admit(p.UID); why != "" {
			l.refuse(c, p, why)
			continue
		}
		pc := &peerConn{Conn: c, peer: p}
		pc.release = func() { l.release(p.UID) }
		return pc, nil
	}
}

// admit counts a new connection of uid, or says which cap it is over.
func (l *capListener) admit(uid uint32) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byUID[uid] >= l.perUID:
		return fmt.Sprintf("uid %d already has %d connections open (at most %d per uid)", uid, l.byUID[uid], l.perUID)
	case l.n >= l.total:
		return fmt.Sprintf("non-root callers already have %d connections open (at most %d)", l.n, l.total)
	}
	l.byUID[uid]++
	l.n++
	return ""
}

func (l *capListener) release(uid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byUID[uid]--; l.byUID[uid] <= 0 {
		delete(l.byUID, uid)
	}
	l.n--
}

// refuse answers 503 without reading the request, and closes c. The log says so at most
// every 10 s, with the number refused since, so a flood does not flood the log too.
func (l *capListener) refuse(c net.Conn, p Peer, why string) {
	body := fmt.Sprintf(`{"error": "too many connections: %s; retry when yours are done", "exit_code": 5}`+"\n", why)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	io.WriteString(c, fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		http.StatusServiceUnavailable, http.StatusText(http.StatusServiceUnavailable), len(body), body))
	c.Close()
	l.mu.Lock()
	l.refused++
	n, now := l.refused, time.Now()
	logIt := now.Sub(l.logged) >= 10*time.Second
	if logIt {
		l.refused, l.logged = 0, now
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn("connection refused: over the cap", "uid", p.UID, "pid", p.PID, "why", why, "refused_since_last_line", n)
	}
}

// peerConn is an admitted connection with its peer; closing it gives its place back.
type peerConn struct {
	net.Conn
	peer    Peer
	release func()
	once    sync.Once
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	if c.release != nil {
		c.once.Do(c.release)
	}
	return err
}

// deadlineBody clears the connection's read deadline once the body has been read to its
// end: the server keeps reading the connection in the background (to notice a caller that
// leaves) while the operation runs, and that read must not time out.
type deadlineBody struct {
	io.ReadCloser
	clear func()
	once  sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.clear)
	}
	return n, err
}

// boundBodies gives every request body BodyTimeout to arrive, from the time its handler
// starts: a body sent a byte at a time cannot hold a connection for longer.
func (s *Server) boundBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(s.bodyTimeout())); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { rc.SetReadDeadline(time.Time{}) }}
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) bodyTimeout() time.Duration {
	if s.BodyTimeout > 0 {
		return s.BodyTimeout
	}
	return DefaultBodyTimeout
}

func (s *Server) connCaps() (perUID, total int) {
	perUID, total = s.MaxConnsPerUID, s.MaxConns
	if perUID <= 0 {
		perUID = DefaultMaxConnsPerUID
	}
	if total <= 0 {
		total = DefaultMaxConns
	}
	return perUID, total
}
