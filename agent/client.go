package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

// Client talks to the agent over its socket.
type Client struct {
	// Socket is the agent's socket.
	Socket string
}

// httpClient speaks HTTP over the socket.
func (c Client) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", c.Socket)
			if err != nil {
				return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.Socket, err)
			}
			return conn, nil
		},
		DisableKeepAlives: true,
	}}
}

// Dial reports whether an agent accepts connections on the socket (it does not send a request).
func (c Client) Dial() error {
	conn, err := net.DialTimeout("unix", c.Socket, time.Second)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, c.Socket, err)
	}
	return conn.Close()
}

// Exec sends a command line to POST /v1/exec and returns what it printed and its exit code.
// A refusal before the command ran is a *StatusError; no agent is ErrUnreachable.
func (c Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	err := c.Do(ctx, http.MethodPost, "/"+APIVersion+"/exec", req, &res)
	return res, err
}

// Do sends a request with body (JSON-encoded unless it is []byte) and decodes a 200 answer
// into out.
func (c Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if errors.Is(err, ErrUnreachable) {
			return fmt.Errorf("%w at %s", ErrUnreachable, c.Socket)
		}
		return fmt.Errorf("agent at %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("agent at %s: read the answer: %w", c.Socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Status: resp.StatusCode}
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
