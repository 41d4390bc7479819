package agent

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// wantsStream reports whether the caller asked for a streamed answer (Accept:
// application/x-ndjson): an operation's progress events as they happen, then its result.
func wantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == agentapi.NDJSON {
				return true
			}
		}
	}
	return false
}

// stream is a streamed answer: one JSON line per StreamLine, each flushed as it is written.
// The 200 header goes with the first line, so that a request refused before anything ran
// still gets its usual status and ErrorBody. Events come from the operation's goroutine (a
// change runs on the worker): a caller that left is not written to again.
type stream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	started bool
	closed  bool
}

// line writes one line of the stream.
func (s *stream) line(l agentapi.StreamLine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if !s.started {
		s.w.Header().Set("Content-Type", agentapi.NDJSON)
		s.w.Header().Set("X-Content-Type-Options", "nosniff")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	s.w.Write(append(b, '\n'))
	http.NewResponseController(s.w).Flush()
}

// event is a RunEnv.Progress that streams each event as it happens.
func (s *stream) event(ev any) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	s.line(agentapi.StreamLine{Event: b})
}

// hasStarted reports whether a line was written (the status is then 200).
func (s *stream) hasStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// close ends the stream: nothing is written after it (the handler returns).
func (s *stream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}
