package clitree

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/vfio"
)

func TestBindUnbindCLIJSON(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	k := withKernel(t, tr)

	// Flags after the arguments, as users type them.
	out, code := run(t, "--host-root", tr.Dir(), "bind", "01:00.0", "--output", "json", "--timeout", "2s")
	if code != 0 {
		t.Fatalf("bind exit %d: %s", code, out)
	}
	var res vfio.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !res.Changed || len(res.Groups) != 1 || res.Groups[0].VFIODev == "" || !res.Groups[0].Viable {
		t.Errorf("result %+v", res)
	}
	var raw map[string]any
	json.Unmarshal([]byte(out), &raw)
	dev := raw["devices"].([]any)[1].(map[string]any)
	for _, key := range []string{"address", "iommu_group", "from", "to", "changed"} {
		if _, ok := dev[key]; !ok {
			t.Errorf("devices[1] has no %q: %v", key, dev)
		}
	}
	if dev["from"] != "snd_hda_intel" || dev["to"] != "vfio-pci" || dev["changed"] != true {
		t.Errorf("audio change %v", dev)
	}
	if tr.Driver(gpu) != "vfio-pci" || tr.Driver(audio) != "vfio-pci" {
		t.Fatal("not bound")
	}

	// Binding again: success, nothing written, says so; steps is [] (not null) in JSON.
	out, code = run(t, "--host-root", tr.Dir(), "bind", "0000:01:00.1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"steps": []`) {
		t.Fatalf("second bind -o json exit %d:\n%s", code, out)
	}
	n := len(k.Writes())
	out, code = run(t, "--host-root", tr.Dir(), "bind", "0000:01:00.1")
	if code != 0 || !strings.Contains(out, "already bound") || len(k.Writes()) != n {
		t.Fatalf("second bind exit %d wrote %d:\n%s", code, len(k.Writes())-n, out)
	}

	out, code = run(t, "--host-root", tr.Dir(), "unbind", "0000:01:00.0")
	if code != 0 || !strings.Contains(out, "snd_hda_intel") || !strings.Contains(out, "back on host drivers") {
		t.Fatalf("unbind exit %d:\n%s", code, out)
	}
	if tr.Driver(audio) != "snd_hda_intel" || tr.Driver(gpu) != "" {
		t.Fatalf("after unbind: gpu %q audio %q", tr.Driver(gpu), tr.Driver(audio))
	}
}

func TestBindCLIExitCodes(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	igpu := tr.IntelGVTg()
	other := tr.AddPCI(hosttest.PCI{Addr: "0000:05:00.0", Vendor: 0x1002, Device: 0x5046, Class: 0x030000})
	withKernel(t, tr)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bind", igpu.String()}, exitRefused, "boot VGA"},
		{[]string{"bind", "0000:09:00.0"}, exitNotFound, "0000:09:00.0"},
		{[]string{"bind", "zz:00.0"}, exitUsage, "parse PCI address"},
		{[]string{"bind"}, exitUsage, "at least one PCI address"},
		{[]string{"unbind", igpu.String()}, exitOK, "nothing to do"},
	} {
		out, code := run(t, append([]string{"--host-root", tr.Dir()}, c.args...)...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s", c.args, code, c.code, out)
		}
	}
	// Not in the ledger: refused with exit 4, naming the device and the ledger.
	tr.Bind(other, "vfio-pci")
	app := newApp(testEnv())
	var sink strings.Builder
	app.Writer, app.ErrWriter = &sink, &sink
	err := app.Run(t.Context(), []string{"vgpu-host", "--host-root", tr.Dir(), "unbind", other.String()})
	if exitCode(err) != exitRefused || !strings.Contains(err.Error(), other.String()) || !strings.Contains(err.Error(), "not in the vgpu-host ledger") {
		t.Fatalf("unbind of a foreign vfio device: exit %d err %v", exitCode(err), err)
	}
	if out, code := run(t, "--host-root", tr.Dir(), "unbind", other.String(), "--force"); code != 0 {
		t.Fatalf("forced unbind exit %d: %s", code, out)
	}
}

func TestBindCLIDryRun(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	k := withKernel(t, tr)
	out, code := run(t, "--host-root", tr.Dir(), "bind", gpu.String(), "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	r := tr.Root
	for _, line := range []string{
		"echo vfio-pci > " + r.PCIDevice(gpu, "driver_override"),
		"echo " + audio.String() + " > " + r.PCIDriver("snd_hda_intel", "unbind"),
		"echo " + audio.String() + " > " + r.Sys("bus", "pci", "drivers_probe"),
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("dry run output lacks %q:\n%s", line, out)
		}
	}
	if len(k.Writes()) != 0 || tr.Driver(audio) != "snd_hda_intel" {
		t.Fatal("dry run changed the host")
	}
}

func TestBindCLITimeoutIsBusy(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	gpu, audio := tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "nvidia")
	k := withKernel(t, tr)
	k.Hold(audio)
	defer k.Release(audio)
	start := time.Now()
	_, code := run(t, "--host-root", tr.Dir(), "bind", gpu.String(), "--timeout", "100ms")
	if code != exitBusy || time.Since(start) > 3*time.Second {
		t.Fatalf("exit %d after %s, want %d quickly", code, time.Since(start), exitBusy)
	}
	if tr.Driver(gpu) != "nvidia" {
		t.Fatal("GPU not put back")
	}
}
