package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vgpu-host/vgpu-host/agent/reconcile"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/mdev"
)

// fakeHost: a consumer GPU + audio on vfio-pci (passed through), an A100 mdev parent on
// NUMA node 1 with two A100-4C instances, the mbochs sample parent, and a ledger giving the
// GPU and its audio to train-01 and both instances to desk-01.
func fakeHost(t *testing.T) (*hosttest.Tree, host.Address, []string) {
	t.Helper()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	tr.LoadDriver("vfio-pci")
	tr.Bind(gpu, "vfio-pci")
	tr.Unbind(audio)
	tr.Bind(audio, "vfio-pci")
	a100 := tr.DatacenterGPU("0000:00:05.0", "0000:41:00.0", "nvidia", 1)
	tr.A100Mdev(a100)
	tr.Mbochs()
	k := hosttest.NewKernel(tr)
	ins, err := mdev.New(tr.Root, k).Create(context.Background(), mdev.CreateRequest{Parent: a100.String(), Profile: "A100-4C", Count: 2, Owner: "desk-01"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{ins[0].UUID, ins[1].UUID}
	err = ledger.Open(tr.Root).Update(func(b *ledger.Book) error {
		if err := b.Claim("train-01", ledger.Claim{Kind: ledger.KindPCI, ID: gpu.String()}, ledger.Claim{Kind: ledger.KindPCI, ID: audio.String(), Detail: "companion"}); err != nil {
			return err
		}
		return b.Claim("desk-01", ledger.Claim{Kind: ledger.KindMdev, ID: ids[0]}, ledger.Claim{Kind: ledger.KindMdev, ID: ids[1]})
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr, a100, ids
}

// TestHostMetricsOnFakeHost: what the scrape reads from the host and the ledger.
func TestHostMetricsOnFakeHost(t *testing.T) {
	tr, a100, _ := fakeHost(t)
	m := New(HostSource{Root: tr.Root})
	want := `
# HELP vgpuhost_allocations Devices the allocation ledger gives each VM, by kind (pci, mdev, vendor-vgpu).
# TYPE vgpuhost_allocations gauge
vgpuhost_allocations{kind="mdev",vm="desk-01"} 2
vgpuhost_allocations{kind="pci",vm="train-01"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "vgpuhost_allocations"); err != nil {
		t.Error(err)
	}
	out := scrape(t, m)
	for _, line := range []string{
		`vgpuhost_gpu_info{address="0000:01:00.0",device="2206",driver="vfio-pci",mode="passthrough",numa_node="-1",vendor="10de"} 1`,
		`vgpuhost_gpu_info{address="` + a100.String() + `",device="20b0",driver="nvidia",mode="mdev",numa_node="1",vendor="10de"} 1`,
		`vgpuhost_mdev_available_instances{parent="` + a100.String() + `",type="nvidia-471",type_name="GRID A100-4C"} 8`,
		`vgpuhost_mdev_used_instances{parent="` + a100.String() + `",type="nvidia-471",type_name="GRID A100-4C"} 2`,
		`vgpuhost_mdev_used_instances{parent="mbochs",type="mbochs-small",type_name="small"} 0`,
		`vgpuhost_source_up{source="inventory"} 1`,
		`vgpuhost_source_up{source="ledger"} 1`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("scrape lacks\n  %s\n%s", line, grep(out, "vgpuhost_"))
		}
	}
	// The audio function is no GPU: no info series.
	if strings.Contains(out, `address="0000:01:00.1"`) {
		t.Error("the audio function has a gpu_info series")
	}
	lint(t, m)
}

// TestPushedMetrics: operations, drift and the reconcile result.
func TestPushedMetrics(t *testing.T) {
	tr, _, _ := fakeHost(t)
	m := New(HostSource{Root: tr.Root})
	m.ObserveOp("apply", 30*time.Millisecond, nil)
	m.ObserveOp("apply", 3*time.Second, errors.New("no free GPU"))
	m.ObserveOp("bind", time.Millisecond, nil)
	m.Drift("train-01", "domain-undefined")
	m.Drift("train-01", "domain-undefined") // the same drift seen again: no new event
	m.Drift("desk-01", "device-detached")
	m.ResolveDrift("desk-01", "device-detached")
	end := time.Unix(1_790_000_000, 0)
	m.Reconcile(reconcile.Result{Started: end.Add(-250 * time.Millisecond), Duration: 250 * time.Millisecond, Steps: []reconcile.Step{
		{Kind: reconcile.KindSRIOV, Result: reconcile.Applied, Duration: 200 * time.Millisecond},
		{Kind: reconcile.KindMdev, Result: reconcile.Already, Duration: 10 * time.Millisecond},
		{Kind: reconcile.KindMdev, Result: reconcile.Applied, Duration: 10 * time.Millisecond},
		{Kind: reconcile.KindVFIO, Result: reconcile.Failed, Duration: 30 * time.Millisecond},
	}})
	out := scrape(t, m)
	for _, line := range []string{
		`vgpuhost_operation_duration_seconds_count{op="apply"} 2`,
		`vgpuhost_operation_duration_seconds_bucket{op="apply",le="0.05"} 1`,
		`vgpuhost_operation_errors_total{op="apply"} 1`,
		`vgpuhost_operation_errors_total{op="bind"} 0`,
		`vgpuhost_drift_events_total{kind="domain-undefined"} 1`,
		`vgpuhost_drift_events_total{kind="device-detached"} 1`,
		`vgpuhost_drift_current{kind="domain-undefined",vm="train-01"} 1`,
		`vgpuhost_reconcile_steps{kind="mdev",result="applied"} 1`,
		`vgpuhost_reconcile_steps{kind="mdev",result="already"} 1`,
		`vgpuhost_reconcile_steps{kind="vfio",result="failed"} 1`,
		`vgpuhost_reconcile_steps{kind="vendor-vgpu",result="failed"} 0`,
		`vgpuhost_reconcile_kind_duration_seconds{kind="sriov"} 0.2`,
		`vgpuhost_reconcile_duration_seconds 0.25`,
		`vgpuhost_reconcile_last_timestamp_seconds 1.79e+09`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("scrape lacks\n  %s\n%s", line, grep(out, "vgpuhost_"))
		}
	}
	if strings.Contains(out, `vgpuhost_drift_current{kind="device-detached"`) {
		t.Error("a resolved drift is still current")
	}
	lint(t, m)
}

// TestUnreadableSourcesDoNotFailTheScrape: a ledger that cannot be read (damaged) and a host
// without sysfs still give a scrape, saying which source is down.
func TestUnreadableSourcesDoNotFailTheScrape(t *testing.T) {
	tr := hosttest.New(t)
	tr.WriteFile("var/lib/vgpu-host/ledger.json", "{")
	m := New(HostSource{Root: tr.Root})
	out := scrape(t, m)
	if !strings.Contains(out, `vgpuhost_source_up{source="ledger"} 0`+"\n") {
		t.Errorf("damaged ledger not reported:\n%s", grep(out, "vgpuhost_source_up"))
	}
}

// scrape gets /metrics through Handler, as Prometheus would.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: %s\n%s", resp.Status, b)
	}
	return string(b)
}

// lint runs client_golang's metric linter (the checks of promtool check metrics) on
// everything the registry gathers.
func lint(t *testing.T, m *Metrics) {
	t.Helper()
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestHealthMetrics: a device handed back healthy after an FLR, and one quarantined with its
// config space all ones; AER totals as last read.
func TestHealthMetrics(t *testing.T) {
	tr := hosttest.New(t)
	good := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "vfio-pci", 0)
	bad := tr.DatacenterGPU("0000:60:01.0", "0000:61:00.0", "vfio-pci", 1)
	tr.SetAER(good, 3, 0, 0)
	k := hosttest.NewKernel(tr)
	tr.SetConfigAllOnes(bad)
	_, err := host.Handback(context.Background(), tr.Root, k, []host.Released{{Address: good}, {Address: bad}},
		host.HandbackOptions{Policy: host.HealthPolicy{Reset: host.ResetAuto, ResetTimeout: time.Second}, Reset: true})
	if err != nil {
		t.Fatal(err)
	}
	m := New(HostSource{Root: tr.Root})
	out := scrape(t, m)
	for _, line := range []string{
		`vgpuhost_device_health{address="0000:41:00.0",reason="ok"} 1`,
		`vgpuhost_device_health{address="0000:61:00.0",reason="config-all-ones,reset-failed"} 0`,
		`vgpuhost_device_resets_total{address="0000:41:00.0",method="flr"} 1`,
		`vgpuhost_aer_errors_total{address="0000:41:00.0",severity="correctable"} 3`,
		`vgpuhost_aer_errors_total{address="0000:41:00.0",severity="fatal"} 0`,
		`vgpuhost_source_up{source="health"} 1`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("scrape lacks\n  %s\n%s", line, grep(out, "vgpuhost_"))
		}
	}
	lint(t, m)
}

// TestXidAndGoneMetrics: the agent's health watch turns an Xid from NVML and a function
// removed from the bus into vgpuhost_nvidia_xid_total and vgpuhost_device_health within 5 s of
// the event, scraped as Prometheus would.
func TestXidAndGoneMetrics(t *testing.T) {
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "vfio-pci", 0)
	gone := tr.DatacenterGPU("0000:60:01.0", "0000:61:00.0", "vfio-pci", 1)
	for _, a := range []host.Address{gpu, gone} {
		if err := host.RecordBaseline(tr.Root, a, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	w := host.NewHealthWatch(tr.Root)
	w.Poll = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	m := New(HostSource{Root: tr.Root})
	start := time.Now()
	for _, x := range []uint64{79, 13, 13} {
		w.Xids() <- host.XidEvent{Address: gpu, Xid: x, GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC()}
	}
	tr.RemoveFunction(gone)
	want := []string{
		`vgpuhost_nvidia_xid_total{address="0000:41:00.0",xid="79"} 1`,
		`vgpuhost_nvidia_xid_total{address="0000:41:00.0",xid="13"} 2`,
		`vgpuhost_device_health{address="0000:41:00.0",reason="nvidia-xid"} 0`,
		`vgpuhost_device_health{address="0000:61:00.0",reason="gone"} 0`,
	}
	var out string
	for {
		out = scrape(t, m)
		missing := 0
		for _, line := range want {
			if !strings.Contains(out, line+"\n") {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("not in the metrics within 5 s: want\n%s\n%s", strings.Join(want, "\n"), grep(out, "vgpuhost_"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("in the metrics after %v", time.Since(start))
	lint(t, m)
}
