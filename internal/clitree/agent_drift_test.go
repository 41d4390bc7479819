package clitree

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
)

// TestAgentDriftLibvirtd: the agent process (vgpu-host-agent: metrics, reconcile, drift, warm
// connection) on the real libvirtd. An applied VM (in the ledger, its domain defined with the
// GPU and its audio as hostdevs) is undefined with `virsh undefine` behind the agent's back:
// within a second the agent counts the drift in /metrics, its status shows the domain
// missing, and, nothing holding the devices, the policy releases the allocation through the
// agent's own queue (the VM leaves the ledger). /v1/health says ready after the boot
// reconcile, and /metrics passes the exposition checks of a Prometheus scrape.
func TestAgentDriftLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	bin := binary(t)
	name := "vgpuhost-test-agentdrift"
	virsh := func(args ...string) (string, error) {
		out, err := exec.Command("virsh", append([]string{"-c", uri}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { _, _ = virsh("undefine", name) })
	var err error
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "vfio-pci")
	dir := tr.Dir()
	err = ledger.Open(tr.Root).Update(func(b *ledger.Book) error {
		if err := b.Claim(name, ledger.Claim{Kind: ledger.KindPCI, ID: gpu.String()}, ledger.Claim{Kind: ledger.KindPCI, ID: audio.String(), Detail: "companion"}); err != nil {
			return err
		}
		e := b.Entry(name)
		e.Phase, e.URI = ledger.PhaseApplied, uri
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var hd strings.Builder
	for _, a := range []host.Address{gpu, audio} {
		fmt.Fprintf(&hd, `<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/></source></hostdev>`,
			a.Domain, a.Bus, a.Device, a.Function)
	}
	xmlFile := tr.Root.Path("domain.xml")
	if err := os.WriteFile(xmlFile, []byte(fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>%s</devices></domain>`, name, hd.String())), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := virsh("define", xmlFile); err != nil {
		t.Fatalf("virsh define: %v\n%s", err, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for --metrics-listen
	if err != nil {
		t.Fatal(err)
	}
	tcp := l.Addr().String()
	l.Close()
	_, logs := startAgentProcessArgs(t, bin, dir, uri, []string{"--metrics-listen", tcp})
	c := agentClient(t, dir)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var h map[string]any
		if err := c.Do(context.Background(), "GET", "/v1/health", nil, &h); err == nil && h["ready"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent is not ready after its reconcile:\n%s", logs.String())
		}
	}
	scrape := func() string {
		hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", c.Socket)
		}}}
		resp, err := hc.Get("http://agent/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if m := scrape(); !strings.Contains(m, `vgpuhost_reconcile_last_timestamp_seconds`) || !strings.Contains(m, `vgpuhost_allocations{kind="pci",vm="`+name+`"} 2`) {
		t.Fatalf("/metrics before the undefine lacks the reconcile or the allocation:\n%s", m)
	}
	resp, err := http.Get("http://" + tcp + "/metrics")
	if err != nil {
		t.Fatalf("--metrics-listen %s: %v", tcp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `vgpuhost_allocations{kind="pci",vm="`+name+`"} 2`) {
		t.Errorf("/metrics over TCP lacks the allocation:\n%s", b)
	}
	time.Sleep(300 * time.Millisecond) // the watcher's first check and its event subscription

	if out, err := virsh("undefine", name); err != nil {
		t.Fatalf("virsh undefine: %v\n%s", err, out)
	}
	t0 := time.Now()
	seen := time.Duration(0)
	for time.Since(t0) < 5*time.Second {
		if strings.Contains(scrape(), `vgpuhost_drift_events_total{kind="domain-undefined"} 1`) {
			seen = time.Since(t0)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if seen == 0 {
		t.Fatalf("no drift in /metrics 5 s after virsh undefine:\n%s", logs.String())
	}
	if seen > time.Second {
		t.Errorf("drift in /metrics %s after virsh undefine, want within 1 s", seen)
	}
	t.Logf("drift in the agent's /metrics %s after virsh undefine", seen.Round(time.Millisecond))
	// Released through the agent's queue: the VM leaves the ledger (and status).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := exec.Command(bin, "--host-root", dir, "--agent", "always", "-o", "json", "status", "--connect", uri).CombinedOutput()
		if !strings.Contains(string(out), name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drifted VM was not released:\n%s\n%s", out, logs.String())
		}
	}
	if !strings.Contains(logs.String(), `"msg":"drift"`) || !strings.Contains(logs.String(), `"vm":"`+name+`"`) {
		t.Errorf("no drift line in the agent's log:\n%s", logs.String())
	}
}
