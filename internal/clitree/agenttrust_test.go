package clitree

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// TestAgentSocketRefusal: what the CLI does with an untrusted socket and one it may not open,
// by --agent mode.
func TestAgentSocketRefusal(t *testing.T) {
	t.Parallel()
	untrusted := &agentapi.UntrustedSocketError{Socket: "/r/run/vgpu-host/agent.sock", Path: "/r/run/vgpu-host", UID: 65534,
		Mode: os.ModeDir | 0o755, Problem: "is owned by uid 65534, not root", Fix: "fix it"}
	denied := &agentapi.SocketPermissionError{Socket: "/run/vgpu-host/agent.sock", GID: 990, Mode: os.ModeSocket | 0o660}
	for _, tc := range []struct {
		err        error
		mode       string
		code       int
		done       bool
		wantStderr string
	}{
		{untrusted, agentAlways, exitRefused, true, "vgpu-host: --agent always: untrusted agent socket /r/run/vgpu-host/agent.sock: its directory /r/run/vgpu-host is owned by uid 65534"},
		{untrusted, agentAuto, 0, false, "vgpu-host: warning: not using the agent, running in-process: untrusted agent socket"},
		{denied, agentAlways, exitRefused, true, "vgpu-host: --agent always: permission denied on the agent socket /run/vgpu-host/agent.sock"},
		{denied, agentAuto, 0, false, ""},
	} {
		var errw bytes.Buffer
		code, done, ok := agentSocketRefusal(tc.err, tc.mode, &errw)
		if !ok || code != tc.code || done != tc.done || !strings.HasPrefix(errw.String(), tc.wantStderr) || (tc.wantStderr == "") != (errw.Len() == 0) {
			t.Errorf("%T, %s: exit %d done %v ok %v, stderr %q", tc.err, tc.mode, code, done, ok, errw.String())
		}
	}
	if _, _, ok := agentSocketRefusal(agentapi.ErrUnreachable, agentAlways, &bytes.Buffer{}); ok {
		t.Error("no agent is not a refusal of the socket")
	}
}

// TestCLINeverTalksToHijackedSocket: a socket in a run/vgpu-host that nobody owns (where
// anyone could have put it) gets nothing from the CLI, in either mode; the message says what
// is wrong. (With forward calling agentSocketRefusal: exit 4 with always, in-process in auto.)
func TestCLINeverTalksToHijackedSocket(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	tr := hosttest.New(t)
	socket := agentSocketUnder(tr.Root)
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chown(filepath.Dir(socket), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			got <- struct{}{}
			c.Close()
		}
	}()
	for _, mode := range []string{agentAlways, agentAuto} {
		args := []string{"--agent", mode, "--host-root", tr.Dir(), "inspect"}
		app := newApp(testEnv())
		pruneUnnamed(app, args)
		var out, errw bytes.Buffer
		app.Writer, app.ErrWriter = &out, &errw
		code := execute(app, append([]string{"vgpu-host"}, args...), &errw)
		switch {
		case mode == agentAlways && (code != exitRefused || !strings.Contains(errw.String(), "untrusted agent socket "+socket)):
			t.Errorf("--agent always: exit %d, want 4 naming the socket:\n%s", code, errw.String())
		case mode == agentAuto && (code != 0 || !strings.Contains(errw.String(), "warning: not using the agent")):
			t.Errorf("--agent auto: exit %d, want the in-process run after a warning:\n%s", code, errw.String())
		}
	}
	select {
	case <-got:
		t.Error("the CLI connected to the hijacked socket")
	case <-time.After(200 * time.Millisecond):
	}
}
