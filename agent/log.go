package agent

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// NewLogger returns the agent's logger: JSON lines (for journald and log shippers) unless
// terminal is set, then slog's text format. level is debug, info, warn or error.
func NewLogger(w io.Writer, level string, terminal bool) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	if terminal {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}
