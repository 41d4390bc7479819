package agentapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrUnreachable is returned by the Client when no agent answers on the socket.
var ErrUnreachable = errors.New("no agent answers")

// StatusError is an answer other than 200 to an exec request: the agent refused it before
// running anything.
type StatusError struct {
	Status int
	Body   ErrorBody
}

func (e *StatusError) Error() string {
	if e.Body.Error != "" {
		return fmt.Sprintf("the agent refused: %s (HTTP %d)", e.Body.Error, e.Status)
	}
	return fmt.Sprintf("the agent refused: HTTP %d", e.Status)
}

// Client talks to the agent over its socket: one HTTP/1.1 request per connection, written
// and read here with net and bufio (net/http's client, and the crypto/tls it links, would
// cost every vgpu-host start its package initialisation for a local socket).
//
// Before it connects, the Client checks that the socket can be trusted (CheckSocketTrusted):
// a socket, or a directory on its path, that someone other than root or the caller could have
// put there is refused with an *UntrustedSocketError, so that nobody can listen in the
// agent's place and receive a root caller's commands and files.
type Client struct {
	// Socket is the agent's socket.
	Socket string
	// TrustUIDs are who may own the socket and its directories (CheckSocketTrusted's default
	// when empty: root and this process's effective uid).
	TrustUIDs []uint32
}

// Dial reports whether an agent accepts connections on the socket (it does not send a request).
func (c Client) Dial() error {
	conn, err := c.dial(context.Background(), time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// dial checks the socket's trust, then connects: no socket, or a connection refused, is
// ErrUnreachable; a socket this caller may not connect to is a *SocketPermissionError.
func (c Client) dial(ctx context.Context, timeout time.Duration) (net.Conn, error) {
	if err := CheckSocketTrusted(c.Socket, c.TrustUIDs...); err != nil {
		var ue *UntrustedSocketError
		if errors.As(err, &ue) {
			return nil, err
		}
		return nil, fmt.Errorf("%w at %s", ErrUnreachable, c.Socket)
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err == nil {
		return conn, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("agent at %s: %w", c.Socket, ctx.Err())
	}
	if errors.Is(err, syscall.EACCES) {
		pe := &SocketPermissionError{Socket: c.Socket}
		if st, serr := os.Lstat(c.Socket); serr == nil {
			pe.Mode = st.Mode()
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				pe.UID, pe.GID = sys.Uid, sys.Gid
			}
		}
		return nil, pe
	}
	return nil, fmt.Errorf("%w at %s", ErrUnreachable, c.Socket)
}

// Exec sends a command request (typed flag values, never a command line) to POST /v1/exec
// and returns what it printed and its exit code. A refusal before the command ran is a
// *StatusError; no agent is ErrUnreachable.
func (c Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	err := c.Do(ctx, "POST", "/"+APIVersion+"/exec", req, &res)
	return res, err
}

// Do sends a request with body (JSON-encoded unless it is []byte) and decodes a 200 answer
// into out. An untrusted socket is an *UntrustedSocketError, one the caller may not connect
// to a *SocketPermissionError (which is ErrUnreachable too), no agent ErrUnreachable. When ctx ends the connection is closed (the agent sees its caller leave) and the
// error wraps ctx's.
func (c Client) Do(ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		payload = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return err
		}
		payload = j
	}
	conn, err := c.dial(ctx, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	status, data, err := roundTrip(conn, method, path, payload)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("agent at %s: %s %s: %w", c.Socket, method, path, err)
	}
	if status != 200 {
		se := &StatusError{Status: status}
		json.Unmarshal(data, &se.Body)
		return se
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("agent at %s: decode the answer: %w", c.Socket, err)
	}
	return nil
}

// roundTrip writes one request on conn (Connection: close, the body with its length) and
// reads the answer: its status code and whole body (by Content-Length, chunked, or up to the
// end of the connection).
func roundTrip(conn net.Conn, method, path string, payload []byte) (int, []byte, error) {
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: agent\r\nUser-Agent: vgpu-host\r\nConnection: close\r\n", method, path)
	if payload != nil || (method != "GET" && method != "HEAD") {
		fmt.Fprintf(&req, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(payload))
	}
	req.WriteString("\r\n")
	req.Write(payload)
	_, werr := conn.Write(req.Bytes())
	// An agent that refuses the request early (413) answers and closes before reading it all:
	// its answer is still there to read after a failed write.
	status, data, err := readResponse(bufio.NewReader(conn), method)
	if err != nil {
		if werr != nil {
			return 0, nil, fmt.Errorf("send the request: %w", werr)
		}
		return 0, nil, err
	}
	return status, data, nil
}

// maxAnswer bounds an answer's body: far above what any command prints.
const maxAnswer = 1 << 30

// readResponse reads an HTTP/1.1 answer, skipping informational (1xx) ones.
func readResponse(r *bufio.Reader, method string) (int, []byte, error) {
	h, err := readHead(r)
	if err != nil {
		return 0, nil, err
	}
	if method == "HEAD" || h.status == 204 || h.status == 304 {
		return h.status, nil, nil
	}
	var data []byte
	switch {
	case h.chunked:
		data, err = readChunked(r)
	case h.length >= 0:
		data = make([]byte, h.length)
		_, err = io.ReadFull(r, data)
	default:
		data, err = io.ReadAll(io.LimitReader(r, maxAnswer))
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read the answer: %w", err)
	}
	return h.status, data, nil
}

// head is an answer's status line and the headers the client uses.
type head struct {
	status      int
	length      int64 // -1: none given
	chunked     bool
	contentType string
}

// readHead reads an answer's status line and headers, skipping informational (1xx) answers.
func readHead(r *bufio.Reader) (head, error) {
	for {
		line, err := readLine(r)
		if err != nil {
			return head{}, fmt.Errorf("read the answer: %w", err)
		}
		proto, rest, _ := strings.Cut(line, " ")
		code, _, _ := strings.Cut(rest, " ")
		status, err := strconv.Atoi(code)
		if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 || status > 999 {
			return head{}, fmt.Errorf("read the answer: malformed status line %q", line)
		}
		h := head{status: status, length: -1}
		for {
			l, err := readLine(r)
			if err != nil {
				return head{}, fmt.Errorf("read the answer's header: %w", err)
			}
			if l == "" {
				break
			}
			k, v, _ := strings.Cut(l, ":")
			v = strings.TrimSpace(v)
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "content-length":
				if h.length, err = strconv.ParseInt(v, 10, 64); err != nil || h.length < 0 || h.length > maxAnswer {
					return head{}, fmt.Errorf("read the answer: bad Content-Length %q", v)
				}
			case "transfer-encoding":
				h.chunked = strings.EqualFold(v, "chunked")
			case "content-type":
				h.contentType = v
			}
		}
		if status >= 200 {
			return h, nil
		}
	}
}

// readChunked reads a chunked body (the agent's server sends one when an answer outgrows its
// buffer and has no Content-Length), ignoring chunk extensions and trailers.
func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 || int64(len(body))+n > maxAnswer {
			return nil, fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			for {
				t, err := readLine(r)
				if err != nil || t == "" {
					return body, err
				}
			}
		}
		start := len(body)
		body = append(body, make([]byte, n)...)
		if _, err := io.ReadFull(r, body[start:]); err != nil {
			return nil, err
		}
		if crlf, err := readLine(r); err != nil || crlf != "" {
			return nil, fmt.Errorf("chunk of %d bytes not followed by CRLF", n)
		}
	}
}

// readLine reads one CRLF- (or LF-) terminated line without its end; a line over 64 KiB is
// an error.
func readLine(r *bufio.Reader) (string, error) {
	var line []byte
	for {
		part, more, err := r.ReadLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		line = append(line, part...)
		if len(line) > 64<<10 {
			return "", errors.New("header line too long")
		}
		if !more {
			return string(line), nil
		}
	}
}
