package host_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// healthTree is one A100 on vfio-pci (flr and bus resets, AER, a x16 link) with a baseline
// recorded as bind records it, and a bystander GPU on nvidia.
func healthTree(t *testing.T) (*hosttest.Tree, *hosttest.Kernel, host.Address, host.Address) {
	t.Helper()
	tr := hosttest.New(t)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "vfio-pci", 0)
	other := tr.DatacenterGPU("0000:60:01.0", "0000:61:00.0", "nvidia", 1)
	for _, a := range []host.Address{gpu, other} {
		tr.SetAER(a, 2, 0, 0)
		tr.SetLink(a, "16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16)
		if err := host.RecordBaseline(tr.Root, a, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return tr, hosttest.NewKernel(tr), gpu, other
}

func problemChecks(h host.DeviceHealth) []string {
	var out []string
	for _, p := range h.Problems {
		out = append(out, p.Check)
	}
	return out
}

func TestCheckDeviceHealthy(t *testing.T) {
	t.Parallel()
	tr, _, gpu, _ := healthTree(t)
	h := host.CheckDevice(tr.Root, gpu, host.CheckOptions{Driver: "vfio-pci"})
	if !h.Healthy || len(h.Problems) > 0 {
		t.Fatalf("a fresh device is unhealthy: %+v", h.Problems)
	}
	if h.AER == nil || h.AER.Correctable != 2 || h.Link.Width != 16 || len(h.BARs) != 3 {
		t.Errorf("check read aer %+v link %+v bars %d", h.AER, h.Link, len(h.BARs))
	}
	if !slices.Equal(h.ResetMethods, []string{"flr", "bus"}) {
		t.Errorf("reset methods %v", h.ResetMethods)
	}
}

// Each failure the check knows, on a fake tree: its reason names it.
func TestCheckDeviceProblems(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		break_ func(tr *hosttest.Tree, a host.Address)
		driver string
		want   string
	}{
		{"all ones", func(tr *hosttest.Tree, a host.Address) { tr.SetConfigAllOnes(a) }, "", host.HealthConfigOnes},
		{"bar size", func(tr *hosttest.Tree, a host.Address) { tr.SetBARSize(a, 1, 256<<20) }, "", host.HealthBAR},
		{"bar lost", func(tr *hosttest.Tree, a host.Address) { tr.LoseConfig(a) }, "", host.HealthBAR},
		{"aer nonfatal", func(tr *hosttest.Tree, a host.Address) { tr.SetAER(a, 2, 1, 0) }, "", host.HealthAERNonFatal},
		{"aer fatal", func(tr *hosttest.Tree, a host.Address) { tr.SetAER(a, 2, 0, 3) }, "", host.HealthAERFatal},
		{"link width", func(tr *hosttest.Tree, a host.Address) { tr.SetLink(a, "16.0 GT/s PCIe", 8, "16.0 GT/s PCIe", 16) }, "", host.HealthLinkDegraded},
		{"driver", func(tr *hosttest.Tree, a host.Address) {}, "nvidia", host.HealthDriver},
		{"gone", func(tr *hosttest.Tree, a host.Address) { tr.RemoveFunction(a) }, "", host.HealthGone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, _, gpu, _ := healthTree(t)
			c.break_(tr, gpu)
			h := host.CheckDevice(tr.Root, gpu, host.CheckOptions{Driver: c.driver})
			if h.Healthy || !slices.Contains(problemChecks(h), c.want) {
				t.Fatalf("want problem %s, got healthy=%v %v", c.want, h.Healthy, h.Problems)
			}
		})
	}
}

// A slower link is a warning, not a problem: GPUs downtrain when idle.
func TestCheckDeviceSlowLinkWarns(t *testing.T) {
	t.Parallel()
	tr, _, gpu, _ := healthTree(t)
	tr.SetLink(gpu, "2.5 GT/s PCIe", 16, "16.0 GT/s PCIe", 16)
	tr.SetAER(gpu, 5, 0, 0)
	h := host.CheckDevice(tr.Root, gpu, host.CheckOptions{})
	if !h.Healthy || len(h.Warnings) != 2 {
		t.Fatalf("healthy=%v problems %v warnings %v", h.Healthy, h.Problems, h.Warnings)
	}
}

// The emulator's reset_method follows the kernel: unsupported names are EINVAL, "default"
// restores, reset takes only 1.
func TestKernelResetMethod(t *testing.T) {
	t.Parallel()
	tr, k, gpu, _ := healthTree(t)
	ctx := context.Background()
	if err := k.Write(ctx, tr.Root.PCIDevice(gpu, "reset_method"), "pm"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unsupported method: %v", err)
	}
	if err := k.Write(ctx, tr.Root.PCIDevice(gpu, "reset_method"), "bus"); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(tr.ReadFile("sys/bus/pci/devices/0000:41:00.0/reset_method")); got != "bus" {
		t.Errorf("reset_method %q", got)
	}
	if err := k.Write(ctx, tr.Root.PCIDevice(gpu, "reset"), "2"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("reset 2: %v", err)
	}
	if err := k.Write(ctx, tr.Root.PCIDevice(gpu, "reset"), "1"); err != nil {
		t.Fatal(err)
	}
	if err := k.Write(ctx, tr.Root.PCIDevice(gpu, "reset_method"), "default"); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(tr.ReadFile("sys/bus/pci/devices/0000:41:00.0/reset_method")); got != "flr bus" {
		t.Errorf("reset_method after default %q", got)
	}
	if got := k.Resets(); !slices.Equal(got, []string{"0000:41:00.0 bus"}) {
		t.Errorf("resets %v", got)
	}
}

// A device whose BAR registers were lost is reset with FLR, comes back, and is not quarantined.
func TestHandbackResetHeals(t *testing.T) {
	t.Parallel()
	tr, k, gpu, other := healthTree(t)
	tr.LoseConfig(gpu)
	res, err := host.Handback(context.Background(), tr.Root, k, []host.Released{{Address: gpu, Driver: "vfio-pci"}},
		host.HandbackOptions{Policy: host.HealthPolicy{Reset: host.ResetFLRIfSupported, ResetTimeout: time.Second}, Op: "unbind"})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Health.Healthy || res[0].Quarantined != nil {
		t.Fatalf("not healed: %+v", res[0])
	}
	if got := k.Resets(); !slices.Equal(got, []string{"0000:41:00.0 flr"}) {
		t.Errorf("resets %v", got)
	}
	if got := strings.TrimSpace(tr.ReadFile("sys/bus/pci/devices/0000:41:00.0/reset_method")); got != "flr bus" {
		t.Errorf("reset_method not put back: %q", got)
	}
	for _, w := range k.Writes() {
		if strings.Contains(w.Path, other.String()) {
			t.Errorf("touched the bystander: %v", w)
		}
	}
	if q, _ := host.LoadQuarantine(tr.Root, gpu); q != nil {
		t.Errorf("quarantined: %+v", q)
	}
}

// Each failure that no reset cures ends in a quarantine record naming it; nothing else is
// touched.
func TestHandbackQuarantines(t *testing.T) {
	t.Parallel()
	hang := func(ctx context.Context, _ host.Address, _ string) error { <-ctx.Done(); return ctx.Err() }
	fail := func(context.Context, host.Address, string) error { return syscall.EIO }
	cases := []struct {
		name   string
		break_ func(tr *hosttest.Tree, a host.Address)
		hook   func(context.Context, host.Address, string) error
		want   []string
	}{
		{"all ones", func(tr *hosttest.Tree, a host.Address) { tr.SetConfigAllOnes(a) }, nil, []string{host.HealthConfigOnes, host.HealthResetFailed}},
		{"bar changed size", func(tr *hosttest.Tree, a host.Address) { tr.SetBARSize(a, 1, 32<<30) }, nil, []string{host.HealthBAR}},
		{"reset fails", func(tr *hosttest.Tree, a host.Address) { tr.LoseConfig(a) }, fail, []string{host.HealthBAR, host.HealthResetFailed}},
		{"reset hangs", func(tr *hosttest.Tree, a host.Address) { tr.LoseConfig(a) }, hang, []string{host.HealthBAR, host.HealthResetFailed}},
		{"aer rising", func(tr *hosttest.Tree, a host.Address) { tr.SetAER(a, 2, 4, 0) }, nil, []string{host.HealthAERNonFatal}},
		{"link degraded", func(tr *hosttest.Tree, a host.Address) { tr.SetLink(a, "16.0 GT/s PCIe", 4, "16.0 GT/s PCIe", 16) }, nil, []string{host.HealthLinkDegraded}},
		{"gone", func(tr *hosttest.Tree, a host.Address) { tr.RemoveFunction(a) }, nil, []string{host.HealthGone}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, k, gpu, other := healthTree(t)
			c.break_(tr, gpu)
			k.ResetHook = c.hook
			otherBefore := tr.ReadFile("sys/bus/pci/devices/0000:61:00.0/config")
			start := time.Now()
			res, err := host.Handback(context.Background(), tr.Root, k, []host.Released{{Address: gpu, Driver: "vfio-pci"}},
				host.HandbackOptions{Policy: host.HealthPolicy{Reset: host.ResetAuto, ResetTimeout: 100 * time.Millisecond}, Op: "unbind"})
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("handback took %s: a hanging reset must be bounded", d)
			}
			q := res[0].Quarantined
			if q == nil {
				t.Fatalf("not quarantined: %+v", res[0].Health)
			}
			for _, w := range c.want {
				if !slices.Contains(problemChecks(res[0].Health), w) {
					t.Errorf("want %s in %v", w, res[0].Health.Problems)
				}
			}
			onDisk, err := host.LoadQuarantine(tr.Root, gpu)
			if err != nil || onDisk == nil || onDisk.Op != "unbind" || onDisk.Since.IsZero() || !strings.Contains(onDisk.Reason(), c.want[0]) {
				t.Fatalf("record %+v, %v", onDisk, err)
			}
			for _, w := range k.Writes() {
				if strings.Contains(w.Path, other.String()) {
					t.Errorf("touched the bystander: %v", w)
				}
			}
			if tr.ReadFile("sys/bus/pci/devices/0000:61:00.0/config") != otherBefore {
				t.Error("bystander's config changed")
			}
			if oq, _ := host.LoadQuarantine(tr.Root, other); oq != nil {
				t.Error("bystander quarantined")
			}
		})
	}
}

// release-quarantine refuses while the device still fails, and clears the record after a
// clean check; AER counts that rose before the quarantine do not hold it for ever.
func TestReleaseQuarantine(t *testing.T) {
	t.Parallel()
	tr, k, gpu, _ := healthTree(t)
	tr.SetAER(gpu, 2, 4, 0)
	tr.SetLink(gpu, "16.0 GT/s PCIe", 4, "16.0 GT/s PCIe", 16)
	if _, err := host.Handback(context.Background(), tr.Root, k, []host.Released{{Address: gpu}},
		host.HandbackOptions{Policy: host.HealthPolicy{Reset: host.ResetNever}}); err != nil {
		t.Fatal(err)
	}
	if _, err := host.ReleaseQuarantine(tr.Root, gpu, time.Now()); !errors.Is(err, host.ErrRefused) {
		t.Fatalf("release of a degraded link: %v", err)
	}
	tr.SetLink(gpu, "16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16) // reseated
	h, err := host.ReleaseQuarantine(tr.Root, gpu, time.Now())
	if err != nil || !h.Healthy {
		t.Fatalf("release after the fix: %v %+v", err, h.Problems)
	}
	if q, _ := host.LoadQuarantine(tr.Root, gpu); q != nil {
		t.Error("record still there")
	}
	st, err := host.LoadHealthState(tr.Root, gpu)
	if err != nil || st.Last == nil || !st.Last.Healthy {
		t.Errorf("last check not recorded: %+v %v", st, err)
	}
	// A mistyped address, neither quarantined nor a device: not found, as bind says it, and
	// no health file for it (it was "still fails its check (gone)", exit 4, with one written).
	typo := host.MustParseAddress("0000:99:00.0")
	if _, err := host.ReleaseQuarantine(tr.Root, typo, time.Now()); !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "check the address with lspci -D") {
		t.Errorf("release of an address with no device: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(tr.Dir(), "var/lib/vgpu-host/health/0000:99:00.0.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a health file was written for an address with no device: %v", err)
	}
}

// The policy file is strict and defaults to flr-if-supported.
func TestHealthPolicy(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	p, err := host.LoadHealthPolicy(tr.Root)
	if err != nil || p.Reset != host.ResetFLRIfSupported || p.ResetTimeout != 10*time.Second {
		t.Fatalf("default %+v %v", p, err)
	}
	tr.WriteFile("etc/vgpu-host/health.yaml", "reset: auto\nreset_timeout: 3s\n")
	if p, err = host.LoadHealthPolicy(tr.Root); err != nil || p.Reset != host.ResetAuto || p.ResetTimeout != 3*time.Second {
		t.Fatalf("auto %+v %v", p, err)
	}
	tr.WriteFile("etc/vgpu-host/health.yaml", "reset: sometimes\n")
	if p, err = host.LoadHealthPolicy(tr.Root); !errors.Is(err, host.ErrInvalid) || p != host.DefaultHealthPolicy {
		t.Fatalf("bad value: %+v %v", p, err)
	}
	tr.WriteFile("etc/vgpu-host/health.yaml", "rest: auto\n")
	if _, err = host.LoadHealthPolicy(tr.Root); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("unknown field: %v", err)
	}
}

// device_specific is tried only while vendor-reset is loaded.
func TestResetOrder(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	m := []string{"device_specific", "flr", "pm", "bus"}
	if got := host.ResetOrder(tr.Root, host.ResetAuto, m); !slices.Equal(got, []string{"flr", "pm", "bus"}) {
		t.Errorf("auto without vendor-reset: %v", got)
	}
	if err := os.MkdirAll(filepath.Join(tr.Dir(), "sys/module/vendor_reset"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := host.ResetOrder(tr.Root, host.ResetAuto, m); !slices.Equal(got, m) {
		t.Errorf("auto with vendor-reset: %v", got)
	}
	if got := host.ResetOrder(tr.Root, host.ResetFLRIfSupported, m); !slices.Equal(got, []string{"flr"}) {
		t.Errorf("flr-if-supported: %v", got)
	}
	if got := host.ResetOrder(tr.Root, host.ResetNever, m); len(got) != 0 {
		t.Errorf("never: %v", got)
	}
}

// The agent's periodic check records what it sees and touches nothing: no reset, no
// quarantine, and the baseline stays, so the handback still sees the AER errors.
func TestObserveAll(t *testing.T) {
	t.Parallel()
	tr, k, gpu, other := healthTree(t)
	tr.SetAER(gpu, 2, 1, 0)
	hs, err := host.ObserveAll(tr.Root, time.Now())
	if err != nil || len(hs) != 2 {
		t.Fatalf("%d checks, %v", len(hs), err)
	}
	if hs[0].Address != gpu || hs[0].Healthy || hs[1].Address != other || !hs[1].Healthy {
		t.Errorf("checks %+v", hs)
	}
	if len(k.Writes()) != 0 {
		t.Errorf("writes %v", k.Writes())
	}
	if q, _ := host.LoadQuarantine(tr.Root, gpu); q != nil {
		t.Error("quarantined by an observation")
	}
	st, _ := host.LoadHealthState(tr.Root, gpu)
	if st.Last == nil || st.Last.Healthy || st.Baseline.AER.NonFatal != 0 {
		t.Errorf("state %+v", st)
	}
	res, _ := host.Handback(context.Background(), tr.Root, k, []host.Released{{Address: gpu}}, host.HandbackOptions{Policy: host.HealthPolicy{Reset: host.ResetNever}})
	if res[0].Quarantined == nil {
		t.Error("the handback missed the AER error the observation saw")
	}
}

// Held against a capture: every function of the real-kernel lab's snapshot (its config space
// as the kernel returned it, resource, reset_method) checks healthy. The emulator's config
// space follows the same layout; here the real one is judged.
func TestCheckDeviceOnLabSnapshot(t *testing.T) {
	t.Parallel()
	root := hosttest.Snapshot(t, hosttest.RepoFile(t, "host/testdata/lab-snapshot.tar.gz"))
	ents, err := os.ReadDir(root.Sys("bus", "pci", "devices"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		a, err := host.ParseAddress(e.Name())
		if err != nil {
			continue
		}
		h := host.CheckDevice(root, a, host.CheckOptions{})
		if !h.Healthy {
			t.Errorf("%s: %v", a, h.Problems)
		}
		n++
	}
	if n < 10 {
		t.Errorf("checked only %d functions", n)
	}
	gpu2 := host.MustParseAddress("0000:02:00.0")
	if h := host.CheckDevice(root, gpu2, host.CheckOptions{}); len(h.BARs) == 0 || !slices.Equal(h.ResetMethods, []string{"bus"}) {
		t.Errorf("GPU2: bars %v reset %v", h.BARs, h.ResetMethods)
	}
}

// A VF reads 0xffff as its vendor and device and 0 as its BARs (PCIe; the lab's capture) and
// is healthy; a VF whose whole header reads all ones is not.
func TestCheckVF(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	pf := tr.SRIOVPF(hosttest.PCI{Addr: "0000:00:0a.0", Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Driver: "nvme"},
		hosttest.VFSpec{Total: 3, VFDevice: 0x0010, VFDriver: "nvme"}, 2)
	vf := tr.VFAddress(pf, 0)
	if c := tr.ReadFile("sys/bus/pci/devices/" + vf.String() + "/config"); c[0] != 0xff || c[3] != 0xff || c[0x10] != 0 {
		t.Fatalf("the emulator's VF config space is not a VF's: % x", c[:0x18])
	}
	if h := host.CheckDevice(tr.Root, vf, host.CheckOptions{}); !h.Healthy {
		t.Fatalf("VF: %v", h.Problems)
	}
	tr.SetConfigAllOnes(vf)
	if h := host.CheckDevice(tr.Root, vf, host.CheckOptions{}); h.Healthy || !slices.Contains(problemChecks(h), host.HealthConfigOnes) {
		t.Fatalf("dead VF: %v", h.Problems)
	}
}

// An empty policy file is the default policy.
func TestHealthPolicyEmpty(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.WriteFile("etc/vgpu-host/health.yaml", "")
	if p, err := host.LoadHealthPolicy(tr.Root); err != nil || p != host.DefaultHealthPolicy {
		t.Fatalf("%+v %v", p, err)
	}
}
