package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// trustRoot is a fake host root for the socket trust tests, and the agent that would serve
// it on ROOT/run/agent.sock (not yet listening).
func trustRoot(t *testing.T) (string, *Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent-trust-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root, _ := host.NewRoot(dir)
	procRoot, _ := host.NewRoot("/")
	return dir, &Server{Root: root, Socket: filepath.Join(dir, "run", "agent.sock"), GID: -1, ProcRoot: procRoot,
		Runner: &scriptRunner{}, Log: discardLogger()}
}

// TestAgentRefusesUntrustedSocketDir: the agent does not serve from a socket directory that
// another user owns, or that group or others may write: whoever can write there could swap
// in their own socket. The refusal is exit 4's, names the directory, its owner and mode, and
// the fix; no socket is created.
func TestAgentRefusesUntrustedSocketDir(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name string
		make func(dir string) error
		want string
	}{
		{"owned by nobody", func(d string) error { return os.Chown(d, 65534, 65534) }, "is owned by uid 65534"},
		{"group-writable", func(d string) error { return os.Chmod(d, 0o775) }, "is writable by group or others"},
		{"world-writable and sticky", func(d string) error { return os.Chmod(d, 0o1777) }, "is writable by group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, s := trustRoot(t)
			run := filepath.Join(dir, "run")
			if err := os.Mkdir(run, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tc.make(run); err != nil {
				t.Fatal(err)
			}
			err := s.Listen()
			if err == nil {
				s.Close()
				t.Fatal("the agent serves from an untrusted directory")
			}
			t.Log(err)
			if !errors.Is(err, host.ErrRefused) || !errors.Is(err, agentapi.ErrUntrustedSocket) {
				t.Errorf("error %v: want ErrRefused and ErrUntrustedSocket", err)
			}
			for _, w := range []string{run, tc.want, "mode d", "chown root " + run} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not say %q", err, w)
				}
			}
			if _, err := os.Lstat(s.Socket); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket left: %v", err)
			}
		})
	}
}

// TestAgentSocketDirLinkOutOfRoot: ROOT/run is a link out of the root; the agent neither
// creates its directory there nor serves from it.
func TestAgentSocketDirLinkOutOfRoot(t *testing.T) {
	dir, s := trustRoot(t)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, "run")); err != nil {
		t.Fatal(err)
	}
	s.Socket = filepath.Join(dir, "run", "vgpu-host", "agent.sock")
	err := s.Listen()
	if err == nil {
		s.Close()
		t.Fatal("the agent serves through a link out of its root")
	}
	if !errors.Is(err, host.ErrRefused) || !strings.Contains(err.Error(), "outside the host root") {
		t.Errorf("error %v: want a refusal saying the path leads outside the host root", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("created outside the root: %v", ents)
	}
}

// hijack listens on socket as root would, but in whatever directory the test made, and
// reports whether anyone connected.
func hijack(t *testing.T, socket string) (connected func() bool) {
	t.Helper()
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			got <- struct{}{}
			c.Close()
		}
	}()
	return func() bool {
		select {
		case <-got:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}
}

// TestClientRefusesUntrustedSocket: the CLI's client never connects to a socket another user
// owns, or one in a directory another user owns or may write; it says which and why.
func TestClientRefusesUntrustedSocket(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name string
		make func(run, sock string) error
		want string
	}{
		{"directory owned by nobody", func(run, _ string) error { return os.Chown(run, 65534, 65534) }, "its directory"},
		{"directory writable by others", func(run, _ string) error { return os.Chmod(run, 0o777) }, "is writable by group or others"},
		{"socket owned by nobody", func(_, sock string) error { return os.Chown(sock, 65534, 65534) }, "the socket is owned by uid 65534"},
		{"directory above owned by nobody", func(run, _ string) error { return os.Chown(filepath.Dir(run), 65534, 65534) }, ", above it, is owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, s := trustRoot(t)
			run := filepath.Dir(s.Socket)
			os.Mkdir(run, 0o755)
			connected := hijack(t, s.Socket)
			if err := tc.make(run, s.Socket); err != nil {
				t.Fatal(err)
			}
			_ = dir
			err := Client{Socket: s.Socket}.Do(context.Background(), "POST", "/v1/exec", cmdReq("change", "x"), nil)
			t.Log(err)
			if !errors.Is(err, agentapi.ErrUntrustedSocket) || errors.Is(err, ErrUnreachable) {
				t.Errorf("error %v: want ErrUntrustedSocket (and not ErrUnreachable)", err)
			}
			if err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q does not say %q", err, tc.want)
			}
			if connected() {
				t.Error("the client connected to the untrusted socket")
			}
		})
	}
}

// TestClientTrustsRootsSocket: the checks pass an agent's own socket (root's, in a directory
// only root writes, under the sticky /tmp), so the client still connects.
func TestClientTrustsRootsSocket(t *testing.T) {
	_, s := trustRoot(t)
	os.Mkdir(filepath.Dir(s.Socket), 0o755)
	connected := hijack(t, s.Socket)
	if err := agentapi.CheckSocketTrusted(s.Socket); err != nil {
		t.Fatal(err)
	}
	Client{Socket: s.Socket}.Dial()
	if !connected() {
		t.Error("the client did not connect to a trusted socket")
	}
}

// TestSocketPermissionDenied: a user the socket's mode keeps out (EACCES) is told so, with the
// socket and the fix, not that no agent answers; the error is still ErrUnreachable, so that
// --agent auto runs the command in-process.
func TestSocketPermissionDenied(t *testing.T) {
	testenv.RequireRoot(t)
	s, _ := serve(t, &scriptRunner{}, nil) // 0660 root:root
	dir := filepath.Dir(filepath.Dir(s.Socket))
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(s.Socket), 0o755)
	_, ask, answers := helperPipes(t, helperAs(t, dir, &syscall.Credential{Uid: 65534, Gid: 65534}, "health", "SOCK="+s.Socket))
	ask.Write([]byte("health\n"))
	if !answers.Scan() {
		t.Fatal("no answer from the client")
	}
	msg := answers.Text()
	t.Log(msg)
	for _, w := range []string{"permission denied on the agent socket " + s.Socket, "mode Srw-rw----", "join its group", "run as root", "--agent never"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q does not say %q", msg, w)
		}
	}
	if strings.Contains(msg, "no agent answers") {
		t.Errorf("message %q says no agent answers", msg)
	}
	pe := &agentapi.SocketPermissionError{Socket: s.Socket}
	if !errors.Is(pe, ErrUnreachable) || !errors.Is(pe, agentapi.ErrSocketPermission) {
		t.Error("SocketPermissionError is not ErrUnreachable and ErrSocketPermission")
	}
}
