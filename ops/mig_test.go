package ops

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
)

// inUseMIG is the real H200's NVML answers replayed, except that a MIG mode change stays
// pending as NVML leaves it while another process holds the GPU (activation
// NVML_ERROR_IN_USE): nvmlmig's own error for it.
type inUseMIG struct{ mig.Backend }

func (b inUseMIG) SetMode(ctx context.Context, address string, enabled bool) error {
	st, err := b.State(ctx)
	if err != nil {
		return err
	}
	return nvmlmig.PendingError(st.GPUs[0], "enable", "activation: NVML_ERROR_IN_USE", true)
}

// A MIG mode change left pending says who holds the NVIDIA device nodes once this call's own
// NVML helper has let go (it is not listed), with how to stop the usual ones (DCGM, and the
// agent's Xid watch for the reset): mig apply and host layout apply alike. Nothing pending,
// nothing added.
func TestMIGPendingNamesTheHolders(t *testing.T) {
	t.Parallel()
	f, err := nvmlfacts.Load(hosttest.SharedFixture(t, "nvidia-h200/nvml-facts.json"))
	if err != nil {
		t.Fatal(err)
	}
	tr := hosttest.New(t)
	tr.DatacenterGPU("0000:00:01.0", "0000:00:06.0", "nvidia", 0) // the H200's address, for the layout
	tr.HoldOpen(812, "nv-hostengine", "/dev/nvidia0")
	tr.HoldOpen(813, "vgpu-host-nvml", "/dev/nvidiactl")
	tr.HoldOpen(814, "bash", "/dev/null")
	env := fakeEnv(t, tr)
	_, mods := env.HostIO()
	env.HostIO = func() (host.Writer, host.ModuleLoader) { return hosttest.NewKernel(tr), mods }
	env.NVML = func() (mig.Backend, func(), error) {
		r := nvmlfacts.NewServer(f)
		if err := nvmlmig.Init(r); err != nil {
			return nil, nil, err
		}
		tr.HoldOpen(900, "vgpu-host-nvml", "/dev/nvidia0") // this call's helper
		release := func() {
			if err := os.RemoveAll(filepath.Join(tr.Dir(), "proc", "900")); err != nil {
				t.Error(err)
			}
		}
		return inUseMIG{nvmlmig.New(r)}, release, nil
	}
	env.LayoutMIG = func() (mig.Backend, layout.MIGPlanner, func()) {
		b, release, err := env.NVML()
		if err != nil {
			t.Fatal(err)
		}
		return b, layout.NVMLPlanner{}, release
	}
	migApply := func() error {
		_, err := MIGApply(context.Background(), env, MIGApplyRequest{MIGPlanRequest: MIGPlanRequest{GPU: "0000:00:06.0", Profiles: []string{"1g.18gb"}}})
		return err
	}
	layoutApply := func() error {
		doc := "apiVersion: vgpu-host/v1\nkind: HostLayout\nconfigs:\n  small:\n    gpus:\n      - select: {address: \"0000:00:06.0\"}\n        mode: mig\n        profiles: [{profile: 1g.18gb, count: 1}]\n"
		_, err := LayoutApply(context.Background(), env, LayoutApplyRequest{LayoutPlanRequest: LayoutPlanRequest{File: "h200.yaml", Data: []byte(doc)}})
		return err
	}
	for name, apply := range map[string]func() error{"mig apply": migApply, "host layout apply": layoutApply} {
		holdersNamed(t, name, apply())
	}

	// No holder left: said so.
	for _, pid := range []string{"812", "813"} {
		if err := os.RemoveAll(filepath.Join(tr.Dir(), "proc", pid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := migApply(); !errors.Is(err, mig.ErrModePending) || !strings.HasSuffix(err.Error(), "; no process holds an NVIDIA device node now") {
		t.Errorf("mig apply with no holder: %v", err)
	}

	// Another error is left as it is.
	plain := errors.New("boom")
	if got := mig.WithHolders(env.Root, plain, func() { t.Error("released for another error") }); got != plain {
		t.Errorf("another error: %v", got)
	}
}

// holdersNamed checks err, what name returned, for the pending mode and the holders of
// TestMIGPendingNamesTheHolders.
func holdersNamed(t *testing.T, name string, err error) {
	t.Helper()
	if !errors.Is(err, mig.ErrModePending) || !errors.Is(err, host.ErrBusy) {
		t.Fatalf("%s: %v, want a pending mode", name, err)
	}
	for _, want := range []string{
		"NVML_ERROR_IN_USE",
		"holding NVIDIA device nodes now: pid 812 (nv-hostengine) has /dev/nvidia0 open; pid 813 (vgpu-host-nvml) has /dev/nvidiactl open (",
		"DCGM's host engine: systemctl stop nvidia-dcgm",
		"for a GPU reset, systemctl stop vgpu-host-agent",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s's error lacks %q:\n%v", name, want, err)
		}
	}
	for _, bad := range []string{"pid 900", "pid 814"} {
		if strings.Contains(err.Error(), bad) {
			t.Errorf("%s's error names %s:\n%v", name, bad, err)
		}
	}
}
