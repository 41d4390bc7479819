package agentcmd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/clitree"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/virt"
)

// The exit codes these tests expect (README, Exit codes).
const (
	exitUsage   = 2
	exitRefused = 4
)

// execute runs argv on the tree with vgpu-host-agent's Env, as its main does.
func execute(argv []string, stderr io.Writer) int {
	return clitree.Execute(Env(), argv, io.Discard, stderr)
}

// agentSocketUnder is the agent's default socket under root.
func agentSocketUnder(root host.Root) string { return clitree.AgentSocket(root) }

// TestAgentMetricsListenUsage: a --metrics-listen that is no address is a usage error (exit
// 2) found before the socket is created, so none is left behind.
func TestAgentMetricsListenUsage(t *testing.T) {
	tr := hosttest.New(t)
	uri := virt.FileScheme + "://" + filepath.Join(tr.Dir(), "libvirt.json")
	var errw bytes.Buffer
	code := execute([]string{"vgpu-host", "--host-root", tr.Dir(), "agent", "--connect", uri, "--metrics-listen", "notanaddr"}, &errw)
	if code != exitUsage || !strings.Contains(errw.String(), "--metrics-listen") {
		t.Errorf("exit %d, want 2:\n%s", code, errw.String())
	}
	if _, err := os.Lstat(agentSocketUnder(tr.Root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}

// TestAgentRefusesSocketDirOfAnotherUser: `vgpu-host agent` on a root whose run/vgpu-host is
// nobody's exits 4, naming the directory, its owner and the fix.
func TestAgentRefusesSocketDirOfAnotherUser(t *testing.T) {
	testenv.RequireRoot(t)
	tr := hosttest.New(t)
	dir := filepath.Dir(agentSocketUnder(tr.Root))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	uri := virt.FileScheme + "://" + filepath.Join(tr.Dir(), "libvirt.json")
	var errw bytes.Buffer
	code := execute([]string{"vgpu-host", "--host-root", tr.Dir(), "agent", "--connect", uri}, &errw)
	if code != exitRefused {
		t.Errorf("exit %d, want 4:\n%s", code, errw.String())
	}
	for _, w := range []string{"untrusted agent socket directory " + dir, "owned by uid 65534", "chown root " + dir} {
		if !strings.Contains(errw.String(), w) {
			t.Errorf("message does not say %q:\n%s", w, errw.String())
		}
	}
}

// TestEnvDownloadsInProcess: vgpu-host-agent's Env downloads an ISO itself (it links
// net/http): VGPU_HOST_AGENT_BIN, the light CLI's way to its downloader, plays no part, and
// the server's answer comes back with its exit code.
func TestEnvDownloadsInProcess(t *testing.T) {
	t.Setenv("VGPU_HOST_AGENT_BIN", filepath.Join(t.TempDir(), "none"))
	iso := bytes.Repeat([]byte("iso9660!"), 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/installer.iso" {
			http.NotFound(w, r)
			return
		}
		w.Write(iso)
	}))
	defer srv.Close()
	env := Env()
	if env.Agent == nil || env.FetchISO == nil {
		t.Fatalf("vgpu-host-agent's Env: Agent %v, FetchISO %v; want both (else it execs itself or vgpu-host-agent)", env.Agent != nil, env.FetchISO != nil)
	}
	dir := t.TempDir()
	sum := fmt.Sprintf("sha256:%x", sha256.Sum256(iso))
	var progress bytes.Buffer
	if err := env.FetchISO(context.Background(), srv.URL+"/installer.iso", sum, filepath.Join(dir, "installer.iso"), &progress); err != nil {
		t.Fatalf("FetchISO: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "installer.iso")); err != nil || !bytes.Equal(got, iso) {
		t.Errorf("downloaded %d bytes, %v; want the served file", len(got), err)
	}
	err := env.FetchISO(context.Background(), srv.URL+"/missing.iso", sum, filepath.Join(dir, "missing.iso"), io.Discard)
	if code := clitree.ExitCode(err); code != 6 || !strings.Contains(fmt.Sprint(err), "404") {
		t.Errorf("missing file: exit %d, %v; want 6 and the server's answer", code, err)
	}
	var none *os.PathError
	if errors.As(err, &none) {
		t.Errorf("the download looked for a downloader binary: %v", err)
	}
}
