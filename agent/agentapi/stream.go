package agentapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ExecStream is Exec with the answer streamed (Accept: application/x-ndjson): event is
// called with each progress event of the command as it happens (the JSON of an ops.Event),
// then the result is returned. An agent that answers with one JSON body (one that streams
// nothing) gives its result the same way, without events. Errors are Exec's.
func (c Client) ExecStream(ctx context.Context, req ExecRequest, event func(json.RawMessage)) (ExecResult, error) {
	var res ExecResult
	err := c.stream(ctx, "POST", "/"+APIVersion+"/exec", req, func(l StreamLine) bool {
		if l.Event != nil {
			event(l.Event)
		}
		if l.Result != nil {
			res = *l.Result
			return true
		}
		return false
	}, &res)
	return res, err
}

// stream sends a request asking for a streamed answer and calls line with each line until it
// returns true (the last line). A 200 answer that is not a stream is decoded into whole.
func (c Client) stream(ctx context.Context, method, path string, body any, line func(StreamLine) bool, whole any) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	conn, err := c.dial(ctx, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	fail := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("agent at %s: %s %s: %w", c.Socket, method, path, err)
	}
	var rq bytes.Buffer
	fmt.Fprintf(&rq, "%s %s HTTP/1.1\r\nHost: agent\r\nUser-Agent: vgpu-host\r\nConnection: close\r\nAccept: %s\r\n", method, path, NDJSON)
	fmt.Fprintf(&rq, "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(payload))
	rq.Write(payload)
	_, werr := conn.Write(rq.Bytes())
	r := bufio.NewReader(conn)
	h, err := readHead(r)
	if err != nil {
		if werr != nil {
			return fail(fmt.Errorf("send the request: %w", werr))
		}
		return fail(err)
	}
	var b io.Reader = io.LimitReader(r, maxAnswer)
	switch {
	case h.chunked:
		b = &chunkedReader{r: r}
	case h.length >= 0:
		b = io.LimitReader(r, h.length)
	}
	// The media type without its parameters (package mime would cost every start its tables).
	mt, _, _ := strings.Cut(h.contentType, ";")
	if h.status != 200 || !strings.EqualFold(strings.TrimSpace(mt), NDJSON) {
		data, err := io.ReadAll(b)
		if err != nil {
			return fail(fmt.Errorf("read the answer: %w", err))
		}
		if h.status != 200 {
			se := &StatusError{Status: h.status}
			json.Unmarshal(data, &se.Body)
			return se
		}
		if err := json.Unmarshal(data, whole); err != nil {
			return fmt.Errorf("agent at %s: decode the answer: %w", c.Socket, err)
		}
		return nil
	}
	lines := bufio.NewReader(b)
	for {
		data, err := lines.ReadBytes('\n')
		if len(bytes.TrimSpace(data)) > 0 {
			var l StreamLine
			if jerr := json.Unmarshal(data, &l); jerr != nil {
				return fmt.Errorf("agent at %s: decode a line of the answer: %w", c.Socket, jerr)
			}
			if line(l) {
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			return fail(errors.New("the answer ended before its result (did the agent stop?)"))
		}
		if err != nil {
			return fail(fmt.Errorf("read the answer: %w", err))
		}
	}
}

// chunkedReader reads a chunked body as it arrives (readChunked reads it whole).
type chunkedReader struct {
	r    *bufio.Reader
	left int64 // bytes left in the chunk being read
	done bool
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		line, err := readLine(c.r)
		if err != nil {
			return 0, err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 || n > maxAnswer {
			return 0, fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			for {
				t, err := readLine(c.r)
				if err != nil {
					return 0, err
				}
				if t == "" {
					break
				}
			}
			c.done = true
			continue
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left == 0 && err == nil {
		if crlf, lerr := readLine(c.r); lerr != nil || crlf != "" {
			return n, fmt.Errorf("chunk not followed by CRLF")
		}
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
