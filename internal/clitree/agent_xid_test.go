package clitree

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestAgentXidFromH200Replay: the agent process, its NVML helper (the release build) replaying
// the real H200's capture with an Xid 79 recorded 1.5 s after the helper's event set is made,
// on the H200 host's sysfs snapshot. The agent's helper waits in nvmlEventSetWait, the event
// reaches the GPU's health file, and within 5 s /metrics has vgpuhost_nvidia_xid_total and
// the GPU unhealthy, /v1/health lists it, and host health shows it.
func TestAgentXidFromH200Replay(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	releaseNVML(t)
	b, err := os.ReadFile(hosttest.SharedFixture(t, "nvidia-h200/nvml-facts.json"))
	if err != nil {
		t.Fatal(err)
	}
	facts := filepath.Join(t.TempDir(), "nvml-facts.json")
	withEvents := strings.TrimRight(string(b), "\n }") + "\n  ,\"events\": [{\"gpu\": 0, \"type\": \"xid\", \"xid\": 79, \"after_ms\": 1500}]\n}\n"
	if err := os.WriteFile(facts, []byte(withEvents), 0o644); err != nil {
		t.Fatal(err)
	}
	setNVML(t, migremote.EnvFacts, facts)
	dir := hosttest.Snapshot(t, hosttest.SharedFixture(t, "nvidia-h200/sysfs-snapshot.tar.gz")).Dir()
	uri := virt.FileScheme + "://" + filepath.Join(dir, "libvirt.json")
	// The agent process gets the test's NVML variables in its environment, as a host's
	// agent has them from its unit.
	var env []string
	nv := nvmlOf(t)
	for _, k := range migremote.EnvVars {
		env = append(env, k+"="+nv.Getenv(k))
	}
	agentCmd, logs := startAgentProcess(t, bin, dir, uri, env...)
	c := agentClient(t, dir)
	start := time.Now()
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", c.Socket)
	}}}
	scrape := func() string {
		resp, err := hc.Get("http://agent/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := []string{
		`vgpuhost_nvidia_xid_total{address="0000:00:06.0",xid="79"} 1`,
		`vgpuhost_device_health{address="0000:00:06.0",reason="nvidia-xid"} 0`,
	}
	var m string
	for {
		m = scrape()
		if strings.Contains(m, want[0]) && strings.Contains(m, want[1]) {
			break
		}
		// The event is due 1.5 s after the helper starts, which is after the agent answers.
		if time.Since(start) > 1500*time.Millisecond+5*time.Second {
			t.Fatalf("no Xid in /metrics 5 s after it was due; want\n%s\nmetrics:\n%s\nagent:\n%s", strings.Join(want, "\n"), m, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("Xid 79 in /metrics %v after the agent answered (due 1.5 s after its helper started)", time.Since(start).Round(time.Millisecond))
	var h struct {
		UnhealthyDevices []struct {
			Address  string `json:"address"`
			Problems []struct {
				Check string `json:"check"`
			} `json:"problems"`
		} `json:"unhealthy_devices"`
	}
	if err := c.Do(context.Background(), "GET", "/v1/health", nil, &h); err != nil || len(h.UnhealthyDevices) != 1 ||
		h.UnhealthyDevices[0].Address != "0000:00:06.0" || h.UnhealthyDevices[0].Problems[0].Check != "nvidia-xid" {
		t.Errorf("/v1/health %+v %v", h, err)
	}
	health := exec.Command(bin, "--host-root", dir, "-o", "json", "host", "health")
	health.Env = append(os.Environ(), env...)
	out, err := health.CombinedOutput()
	var entries []healthEntry
	if err != nil || json.Unmarshal(out, &entries) != nil || len(entries) != 1 || entries[0].Xid["79"] != 1 || len(entries[0].XidPending) != 1 {
		t.Errorf("host health -o json: %v\n%s", err, out)
	}
	if !strings.Contains(logs.String(), "NVIDIA Xid") {
		t.Errorf("the agent did not log the Xid:\n%s", logs.String())
	}
	// The Xid watch's helper, started through /proc/self/fd/3, is named after its file (the
	// kernel named it "3": remote.NameProcess); the agent, started by its path here, keeps its
	// name. The helper, which holds /dev/nvidia* on a real host, has exited when the agent has.
	pid := agentCmd.Process.Pid
	if c := commOf(pid); c != filepath.Base(bin) {
		t.Errorf("the agent's /proc/PID/comm is %q, want %q", c, filepath.Base(bin))
	}
	nvmlChildren := func() []int {
		var hs []int
		for _, c := range childrenOf(t, pid) {
			if commOf(c) == migremote.HelperName {
				hs = append(hs, c)
			}
		}
		return hs
	}
	// Two helpers for good: the Xid watch's and the one the agent's requests share
	// (migremote.Shared), which the MIG state cache's first read started. Three `mig show`
	// through the agent start no other: the same two pids afterwards.
	var helpers []int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if helpers = nvmlChildren(); len(helpers) == 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(helpers) != 2 {
		t.Fatalf("the agent's children named %s: %v, want 2 (the Xid watch's and the shared one)\n%s", migremote.HelperName, helpers, logs.String())
	}
	for range 3 {
		show := exec.Command(bin, "--host-root", dir, "--agent", "always", "mig", "show")
		show.Env = append(os.Environ(), env...)
		if out, err := show.CombinedOutput(); err != nil || !strings.Contains(string(out), "NVIDIA H200  MIG off") {
			t.Fatalf("mig show through the agent: %v\n%s", err, out)
		}
	}
	if after := nvmlChildren(); !slices.Equal(after, helpers) {
		t.Errorf("the agent's %s children after three mig show: %v, before %v (want the same two)", migremote.HelperName, after, helpers)
	}
	// A change through the shared helper, and the state it leaves read back through it: by
	// mig show, and by inspect ADDR asking NVML now (--mig), the GPU named as NVML names it.
	for _, args := range [][]string{{"mig", "apply", "--gpu", "0000:00:06.0", "--profiles", "3g.71gb*2"}, {"mig", "show"}, {"inspect", "0000:00:06.0", "--mig"}} {
		cmd := exec.Command(bin, append([]string{"--host-root", dir, "--agent", "always"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil || args[1] == "show" && !strings.Contains(string(out), "MIG on") ||
			args[0] == "inspect" && !strings.Contains(string(out), "10de:2335 NVIDIA H200\n") ||
			args[0] == "inspect" && !strings.Contains(string(out), "NVIDIA H200  MIG on  instances: 3g.71gb@0-3 3g.71gb@4-7  ") {
			t.Fatalf("%v through the agent: %v\n%s", args, err, out)
		}
	}
	if after := nvmlChildren(); !slices.Equal(after, helpers) {
		t.Errorf("the agent's %s children after mig apply and inspect --mig: %v, before %v (want the same two)", migremote.HelperName, after, helpers)
	}
	if err := agentCmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, agentCmd); code != 0 {
		t.Fatalf("the agent's exit code after SIGTERM: %d\n%s", code, logs.String())
	}
	for _, h := range helpers {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(h))); err == nil {
			t.Errorf("the agent's %s (pid %d) outlived it", migremote.HelperName, h)
		}
	}
}

// commOf is process pid's name (/proc/PID/comm), "" when it cannot be read.
func commOf(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

// childrenOf returns the pids whose parent is pid (/proc/*/stat).
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}
