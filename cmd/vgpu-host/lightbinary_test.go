package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestMainBinaryHasNoNetHTTP: vgpu-host links neither net/http nor crypto/tls (nor the agent's
// server, metrics and drift watcher, nor the HTTP download): their package initialisation
// cost every command's start about a third of a bare Go binary's whole start (README,
// Benchmarks). The agent's client is agentapi's small HTTP/1.1 over the socket; the server and
// the download are in vgpu-host-agent (-tags agent), which the same check shows links them,
// so it looks at the right thing. TestMainBinaryHasNoKubernetes guards the Kubernetes side.
func TestMainBinaryHasNoNetHTTP(t *testing.T) {
	deps := func(tags string) []string {
		t.Helper()
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-tags", tags, "-deps", ".").CombinedOutput()
		if err != nil {
			t.Fatalf("go list -tags %s -deps: %v\n%s", tags, err, out)
		}
		return strings.Fields(string(out))
	}
	heavy := []string{"net/http", "crypto/tls", "github.com/vgpu-host/vgpu-host/agent",
		"github.com/vgpu-host/vgpu-host/agent/metrics", "github.com/vgpu-host/vgpu-host/agent/drift",
		"github.com/vgpu-host/vgpu-host/internal/fetch/httpget", "github.com/prometheus/client_golang/prometheus"}
	light, agent := deps("urfave_cli_no_template"), deps("urfave_cli_no_template,agent")
	for _, p := range heavy {
		if slices.Contains(light, p) {
			t.Errorf("vgpu-host links %s (go list -deps shows who imports it; move it behind -tags agent or into a helper)", p)
		}
		if !slices.Contains(agent, p) {
			t.Errorf("vgpu-host-agent does not link %s: the check looks at the wrong binaries", p)
		}
	}
	if !slices.Contains(light, "github.com/vgpu-host/vgpu-host/agent/agentapi") {
		t.Error("vgpu-host does not link agentapi: the check looks at the wrong binary")
	}
}
