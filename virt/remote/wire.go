package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
)

// The wire: one JSON object per line each way. The client numbers its requests; the server
// answers each, in any order, with the same id:
//
//	→ {"id":3,"method":"Define","args":{"XML":"<domain>…"}}
//	← {"id":3,"reply":"train-01"}
//	← {"id":4,"error":"no-domain\x1fdomain 'x' not found"}
//
// It replaces net/rpc, whose package also links net/http, html/template, crypto/tls and
// encoding/gob into every binary that imports it: vgpu-host paid ~1 ms at every start to
// initialise them although only the commands that talk to libvirt use the helper.
type request struct {
	ID     uint64          `json:"id"`
	Method string          `json:"method"`
	Args   json.RawMessage `json:"args"`
}

type response struct {
	ID    uint64          `json:"id"`
	Error string          `json:"error,omitempty"`
	Reply json.RawMessage `json:"reply,omitempty"`
}

// serverError is an error the server's method returned, as its text.
type serverError string

func (e serverError) Error() string { return string(e) }

// errShutdown: the connection closed before the answer came.
var errShutdown = errors.New("connection is shut down")

// rpcClient sends requests and matches the answers to them.
type rpcClient struct {
	w   io.WriteCloser
	wmu sync.Mutex // one request on the wire at a time

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]*rpcCall
	err     error // set once the read side ended
}

// rpcCall is one request in flight; done closes when err (and reply) are set.
type rpcCall struct {
	reply any
	err   error
	done  chan struct{}
}

func newRPCClient(rwc io.ReadWriteCloser) *rpcClient {
	c := &rpcClient{w: rwc, pending: map[uint64]*rpcCall{}}
	go c.read(rwc)
	return c
}

// read delivers answers until the connection ends, then fails every call still waiting.
func (c *rpcClient) read(r io.Reader) {
	dec := json.NewDecoder(r)
	var err error
	for {
		var resp response
		if err = dec.Decode(&resp); err != nil {
			break
		}
		c.mu.Lock()
		call := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if call == nil {
			continue // the caller gave up (its context ended)
		}
		switch {
		case resp.Error != "":
			call.err = serverError(resp.Error)
		case call.reply != nil && resp.Reply != nil:
			if uerr := json.Unmarshal(resp.Reply, call.reply); uerr != nil {
				call.err = fmt.Errorf("read the reply: %w", uerr)
			}
		}
		close(call.done)
	}
	if errors.Is(err, io.EOF) {
		err = errShutdown
	}
	c.mu.Lock()
	c.err = err
	for id, call := range c.pending {
		delete(c.pending, id)
		call.err = err
		close(call.done)
	}
	c.mu.Unlock()
}

// Go sends method(args); the reply is decoded into reply when the answer comes.
func (c *rpcClient) Go(method string, args, reply any) *rpcCall {
	call := &rpcCall{reply: reply, done: make(chan struct{})}
	b, err := json.Marshal(args)
	if err != nil {
		call.err = fmt.Errorf("encode %s arguments: %w", method, err)
		close(call.done)
		return call
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		call.err = c.err
		close(call.done)
		return call
	}
	c.seq++
	id := c.seq
	c.pending[id] = call
	c.mu.Unlock()

	line, _ := json.Marshal(request{ID: id, Method: method, Args: b})
	c.wmu.Lock()
	_, err = c.w.Write(append(line, '\n'))
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		if _, ok := c.pending[id]; ok {
			delete(c.pending, id)
			call.err = err
			close(call.done)
		}
		c.mu.Unlock()
	}
	return call
}

// Close closes the write side: the server sees the end of its input and stops.
func (c *rpcClient) Close() error { return c.w.Close() }

// serveRPC answers requests on rwc by calling rcvr's exported methods of the net/rpc shape
// `func (T) Name(args A, reply *R) error`, each in its own goroutine, until the input ends;
// then it calls hangup (which wakes long-running calls such as WaitEvents) and waits for the
// calls in flight.
func serveRPC(rcvr any, rwc io.ReadWriter, hangup func()) {
	v := reflect.ValueOf(rcvr)
	dec := json.NewDecoder(rwc)
	var wmu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			if hangup != nil {
				hangup()
			}
			return // EOF: the client hung up
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := invoke(v, req)
			line, err := json.Marshal(resp)
			if err != nil {
				line, _ = json.Marshal(response{ID: req.ID, Error: "error" + sep + "encode the reply: " + err.Error()})
			}
			wmu.Lock()
			_, _ = rwc.Write(append(line, '\n'))
			wmu.Unlock()
		}()
	}
}

// invoke runs one request on the receiver v.
func invoke(v reflect.Value, req request) response {
	resp := response{ID: req.ID}
	m := v.MethodByName(req.Method)
	if !m.IsValid() || m.Type().NumIn() != 2 || m.Type().In(1).Kind() != reflect.Pointer || m.Type().NumOut() != 1 {
		resp.Error = "error" + sep + "no such method " + req.Method
		return resp
	}
	t := m.Type()
	args := reflect.New(t.In(0))
	if err := json.Unmarshal(req.Args, args.Interface()); err != nil {
		resp.Error = "error" + sep + fmt.Sprintf("decode %s arguments: %v", req.Method, err)
		return resp
	}
	reply := reflect.New(t.In(1).Elem())
	if errv := m.Call([]reflect.Value{args.Elem(), reply})[0]; !errv.IsNil() {
		resp.Error = errv.Interface().(error).Error()
		return resp
	}
	b, err := json.Marshal(reply.Interface())
	if err != nil {
		resp.Error = "error" + sep + fmt.Sprintf("encode the %s reply: %v", req.Method, err)
		return resp
	}
	resp.Reply = b
	return resp
}
