package nvmlmig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
)

// EnvRealNVML, set to 1, runs TestRealNVML against this machine's NVIDIA driver. It is for a
// host with an NVIDIA GPU (no CI machine has one); run it there as root, read-only:
//
//	go test -c -o nvmlmig.test ./mig/nvmlmig   # here, with cgo
//	VGPU_TEST_REAL_NVML=1 ./nvmlmig.test -test.run TestRealNVML -test.v   # there, in the repository
const EnvRealNVML = "VGPU_TEST_REAL_NVML"

// The live NVML of a real GPU answers as its capture replays it, and the Xid watch the agent
// keeps registers on it. Read-only: no MIG mode change, no instance, no reset.
//   - Capture of the live driver equals the repository's capture of the same GPU model
//     (testdata/nvidia-h100, ../shared/fixtures/nvidia-h200) in every profile's answer, the
//     name and the memory: the replay is what the hardware says, today, not only when the
//     capture was taken.
//   - The backend's State on the live driver equals its State on that capture's replay.
//   - WaitXid registers for Xid critical errors on every GPU and waits 2 s without an error.
//
// TestRealNVMLChecksOnReplay runs the same checks on the H100's replay, everywhere.
func TestRealNVML(t *testing.T) {
	checkLiveNVML(t, realLib(t), 2*time.Second)
}

// realLib is this machine's NVML, initialised and shut down when tb ends; tb is skipped unless
// EnvRealNVML is 1.
func realLib(tb testing.TB) nvml.Interface {
	tb.Helper()
	if os.Getenv(EnvRealNVML) != "1" {
		tb.Skipf("%s=1 runs this on a host with an NVIDIA GPU and its driver (no CI machine has one)", EnvRealNVML)
	}
	lib := nvml.New()
	if err := Init(lib); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lib.Shutdown() })
	return lib
}

// The checks of TestRealNVML hold on the H100's replay too: what they compare is what the
// replay answers, so they are run here where CI runs them.
func TestRealNVMLChecksOnReplay(t *testing.T) {
	t.Parallel()
	s, _ := replay(t, "nvidia-h100")
	checkLiveNVML(t, s, 10*time.Millisecond)
}

// checkLiveNVML runs TestRealNVML's checks on lib, initialised, waiting xidWait for Xid events.
func checkLiveNVML(t *testing.T, lib nvml.Interface, xidWait time.Duration) {
	t.Helper()
	live, err := nvmlfacts.Capture(lib)
	if err != nil {
		t.Fatal(err)
	}
	if len(live.GPUs) == 0 {
		t.Fatal("NVML lists no GPU")
	}
	ctx := context.Background()
	b := New(lib)
	st, err := b.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range live.GPUs {
		t.Logf("GPU %d: %s, %d bytes, driver %s, MIG %d (pending %d)", i, g.Name, g.MemoryTotal, live.Driver, g.MigCurrent, g.MigPending)
		capture := ""
		for _, c := range realGPUs {
			if c.name == g.Name {
				capture = c.capture
			}
		}
		if capture == "" {
			t.Logf("GPU %d: no capture of a %s in the repository: only the Xid watch is checked", i, g.Name)
			continue
		}
		f, err := nvmlfacts.Load(hosttest.Capture(t, capture+"/nvml-facts.json"))
		if err != nil {
			t.Fatal(err)
		}
		want := f.GPUs[0]
		if g.MigCurrent != 0 || g.MigPending != 0 {
			t.Logf("GPU %d: MIG is on; the capture was taken with MIG off: profiles compared, instances not", i)
		}
		if g.MemoryTotal != want.MemoryTotal || g.PCIDeviceID != want.PCIDeviceID || g.PCISubsystemID != want.PCISubsystemID {
			t.Errorf("GPU %d: %d bytes, device %#x/%#x; the capture %d bytes, %#x/%#x", i, g.MemoryTotal, g.PCIDeviceID, g.PCISubsystemID, want.MemoryTotal, want.PCIDeviceID, want.PCISubsystemID)
		}
		if len(g.Profiles) != len(want.Profiles) {
			t.Errorf("GPU %d: NVML answers %d profile indices, the capture %d", i, len(g.Profiles), len(want.Profiles))
		}
		for k := range min(len(g.Profiles), len(want.Profiles)) {
			got, exp := g.Profiles[k], want.Profiles[k]
			if g.MigCurrent != 0 {
				// Remaining capacity is the empty GPU's only with MIG off.
				got.RemainingCapacity, exp.RemainingCapacity = 0, 0
			}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("GPU %d profile index %d: live %s; the capture %s", i, k, profileString(got), profileString(exp))
			}
		}
		if g.MigCurrent == 0 {
			r := nvmlfacts.NewServer(f)
			if err := Init(r); err != nil {
				t.Fatal(err)
			}
			rs, err := New(r).State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			lg, rg := st.GPUs[i], rs.GPUs[0]
			lg.Address, rg.Address = "", ""
			lg.UUID, rg.UUID = "", "" // a capture zeroes it
			if !reflect.DeepEqual(lg, rg) {
				t.Errorf("GPU %d: State on the live driver\n%+v\non the capture's replay\n%+v", i, lg, rg)
			}
		}
	}
	start := time.Now()
	xs, err := b.(*Backend).WaitXid(ctx, xidWait)
	switch {
	case errors.Is(err, host.ErrUnsupported):
		t.Errorf("Xid watch: no GPU offers Xid events here: %v", err)
	case err != nil:
		t.Errorf("Xid watch: %v", err)
	default:
		t.Logf("Xid watch: registered; %d Xid event(s) in %v: %+v", len(xs), time.Since(start).Round(time.Millisecond), xs)
	}
}

// profileString prints a capture's answer for one profile index.
func profileString(p nvmlfacts.Profile) string {
	if p.Info == nil {
		return fmt.Sprintf("%s (no info)", p.Ret)
	}
	return fmt.Sprintf("%s %+v placements %v (%s) remaining %d", p.Ret, *p.Info, p.Placements, p.RetPlacements, p.RemainingCapacity)
}
