package vfio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// devState is what exact restore must bring back: driver and driver_override of each function.
func devState(tr *hosttest.Tree, addrs ...host.Address) string {
	var s []string
	for _, a := range addrs {
		s = append(s, fmt.Sprintf("%s driver=%q override=%q", a, tr.Driver(a), override(tr, a)))
	}
	return strings.Join(s, "; ")
}

func ledgerLen(t *testing.T, root host.Root) int {
	t.Helper()
	l, err := LoadLedger(root)
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Devices)
}

func TestRestoreAdminOverrideAndDriverless(t *testing.T) {
	t.Parallel()
	// The audio function is on snd_hda_intel with an override an admin set for another driver
	// (it only takes effect at the next probe); the driverless GPU has an override for a driver
	// that is not loaded. Both must come back byte for byte.
	tr, k, b, gpu, audio := consumer(t, "")
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", audio.String(), "driver_override"), "snd_hda_codec_hdmi\n")
	tr.WriteFile(filepath.Join("sys/bus/pci/devices", gpu.String(), "driver_override"), "nouveau\n")
	before := devState(tr, gpu, audio)
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if tr.Driver(gpu) != DriverName || tr.Driver(audio) != DriverName {
		t.Fatalf("not bound: %s", devState(tr, gpu, audio))
	}
	dry, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	r := tr.Root
	want := []string{
		"echo > " + r.PCIDevice(audio, "driver_override"), // cleared so snd_hda_intel may bind
		"echo " + audio.String() + " > " + r.PCIDriver("vfio-pci", "unbind"),
		"echo " + audio.String() + " > " + r.Sys("bus/pci/drivers_probe"),
		"echo snd_hda_codec_hdmi > " + r.PCIDevice(audio, "driver_override"), // then the admin's back
		"echo nouveau > " + r.PCIDevice(gpu, "driver_override"),
		"echo " + gpu.String() + " > " + r.PCIDriver("vfio-pci", "unbind"),
	}
	var got []string
	for _, s := range dry.Steps {
		got = append(got, s.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unbind dry run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{}); err != nil {
		t.Fatal(err)
	}
	if after := devState(tr, gpu, audio); after != before {
		t.Errorf("after unbind:\n %s\nbefore bind:\n %s", after, before)
	}
	if n := ledgerLen(t, tr.Root); n != 0 {
		t.Errorf("ledger keeps %d entries", n)
	}
	noNewID(t, k)
}

func TestRestoreReloadsUnloadedDriver(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "nvidia")
	before := devState(tr, gpu, audio)
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(tr.Root.PCIDriver("nvidia")) // rmmod nvidia while the GPU was on vfio-pci
	res, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after := devState(tr, gpu, audio); after != before {
		t.Errorf("after unbind:\n %s\nbefore bind:\n %s", after, before)
	}
	loaded, planned := false, false
	for _, w := range k.Writes() {
		loaded = loaded || (w.Path == "modprobe" && w.Value == "nvidia")
	}
	for _, s := range res.Steps {
		planned = planned || (s.Op == OpModprobe && s.Value == "nvidia")
	}
	if !loaded || !planned {
		t.Errorf("nvidia not loaded back (writes %v, steps %v)", k.Writes(), res.Steps)
	}
}

type failingLoader struct{}

func (failingLoader) Load(context.Context, string) error {
	return errors.New("modprobe: FATAL: Module nvidia not found")
}

func TestRestoreUnloadableDriverStaysBound(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, audio := consumer(t, "nvidia")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(tr.Root.PCIDriver("nvidia"))
	b.Modules = failingLoader{}
	_, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{})
	if err == nil || !strings.Contains(err.Error(), "modprobe nvidia") || !strings.Contains(err.Error(), gpu.String()) ||
		!strings.Contains(err.Error(), "/sys/bus/pci/drivers/nvidia") {
		t.Fatalf("err = %v, want the missing driver, its path and the fix", err)
	}
	// Not left driverless: still on vfio-pci with its override, and still in the ledger.
	if tr.Driver(gpu) != DriverName || override(tr, gpu) != DriverName {
		t.Errorf("gpu left as %s", devState(tr, gpu))
	}
	l, _ := LoadLedger(tr.Root)
	if e, ok := l.Lookup(gpu); !ok || e.Driver != "nvidia" {
		t.Errorf("gpu ledger entry %+v %v", e, ok)
	}
	if tr.Driver(audio) != "snd_hda_intel" {
		t.Errorf("the audio function was not restored: %s", devState(tr, audio))
	}
}

func TestCorruptLedgerRefusesAndKeepsFile(t *testing.T) {
	t.Parallel()
	for _, content := range []string{"", `{"version": 1, "devices": {"0000:01:00.1": {"driver": "snd_h`} {
		tr, k, b, gpu, _ := consumer(t, "nvidia")
		tr.WriteFile("var/lib/vgpu-host/vfio.json", content)
		for name, op := range map[string]func() error{
			"bind":   func() error { _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); return err },
			"unbind": func() error { _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{}); return err },
		} {
			err := op()
			p := LedgerPath(tr.Root)
			if !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "mv "+p) {
				t.Errorf("%s with ledger %q: err = %v, want corrupt naming %s and the fix", name, content, err, p)
			}
		}
		if len(k.Writes()) != 0 {
			t.Errorf("wrote %v with a corrupt ledger", k.Writes())
		}
		if got := tr.ReadFile("var/lib/vgpu-host/vfio.json"); got != content {
			t.Errorf("corrupt ledger rewritten to %q", got)
		}
	}
}

// killAt is a Writer that dies (as kill -9 would, running no revert) at its n-th write,
// before or after passing it on.
type killAt struct {
	next  host.Writer
	n     int
	after bool
	count int
}

func (k *killAt) Write(ctx context.Context, path, value string) error {
	k.count++
	if k.count == k.n && !k.after {
		runtime.Goexit()
	}
	err := k.next.Write(ctx, path, value)
	if k.count == k.n && k.after {
		runtime.Goexit()
	}
	return err
}

// killed runs op with b's writer replaced by one that dies at write n; it reports whether
// the run died (false: op finished before write n).
func killed(b *Binder, n int, after bool, op func(*Binder)) bool {
	kb := *b
	kw := &killAt{next: b.W, n: n, after: after}
	kb.W = kw
	done := make(chan bool)
	go func() {
		finished := false
		defer func() { done <- !finished }()
		op(&kb)
		finished = true
	}()
	return <-done
}

func TestCrashAtEveryWriteConverges(t *testing.T) {
	t.Parallel()
	bind := func(b *Binder) { b.Bind(ctx, []host.Address{host.MustParseAddress("0000:01:00.0")}, BindOptions{}) }
	unbind := func(b *Binder) { b.Unbind(ctx, []host.Address{host.MustParseAddress("0000:01:00.0")}, UnbindOptions{}) }
	for _, phase := range []string{"bind", "unbind"} {
		for n := 1; ; n++ {
			died := false
			for _, after := range []bool{false, true} {
				for _, next := range []string{"bind", "unbind"} {
					name := fmt.Sprintf("%s killed %s write %d, then %s", phase, map[bool]string{false: "before", true: "after"}[after], n, next)
					tr, _, b, gpu, audio := consumer(t, "nvidia")
					tr.WriteFile(filepath.Join("sys/bus/pci/devices", audio.String(), "driver_override"), "snd_hda_codec_hdmi\n")
					boot := devState(tr, gpu, audio)
					op := bind
					if phase == "unbind" {
						bind(b)
						if tr.Driver(gpu) != DriverName {
							t.Fatalf("%s: setup bind failed", name)
						}
						op = unbind
					}
					if !killed(b, n, after, op) {
						continue
					}
					died = true
					if next == "bind" {
						if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
							t.Errorf("%s: %v", name, err)
							continue
						}
						for _, a := range []host.Address{gpu, audio} {
							if tr.Driver(a) != DriverName || override(tr, a) != DriverName {
								t.Errorf("%s: %s", name, devState(tr, a))
							}
						}
					}
					if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{}); err != nil {
						t.Errorf("%s: unbind: %v", name, err)
						continue
					}
					if got := devState(tr, gpu, audio); got != boot {
						t.Errorf("%s: not back to the boot state:\n %s\nwant\n %s", name, got, boot)
					}
					if n := ledgerLen(t, tr.Root); n != 0 {
						t.Errorf("%s: ledger keeps %d entries", name, n)
					}
				}
			}
			if !died {
				if n < 6 {
					t.Errorf("%s made only %d writes", phase, n-1)
				}
				break
			}
		}
	}
}

func TestPersistRemovesOnlyWhatBindWrote(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, audio := consumer(t, "")
	gpuConf, audioConf := "etc/driverctl.d/pci-"+gpu.String(), "etc/driverctl.d/pci-"+audio.String()
	// The admin already persisted the audio function to another driver with driverctl.
	tr.WriteFile(audioConf, "snd_hda_codec_hdmi\n")
	res, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr.ReadFile(gpuConf) != "vfio-pci\n" || tr.ReadFile(audioConf) != "vfio-pci\n" {
		t.Fatalf("overrides %q %q", tr.ReadFile(gpuConf), tr.ReadFile(audioConf))
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "replaced /etc/driverctl.d/pci-"+audio.String()) {
		t.Errorf("no warning about the replaced override: %v", res.Warnings)
	}
	// Unbind without --persist: restored now, but says the files bring vfio-pci back at boot.
	res, err = b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "unbind --persist "+gpu.String()) || tr.ReadFile(gpuConf) != "vfio-pci\n" {
		t.Errorf("unbind without --persist: warnings %v, override %q", res.Warnings, tr.ReadFile(gpuConf))
	}
	// unbind --persist later still removes what bind wrote and puts the admin's file back.
	if _, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	if host.Exists(filepath.Join(tr.Dir(), gpuConf)) {
		t.Error("the GPU override bind wrote is left behind")
	}
	if got := tr.ReadFile(audioConf); got != "snd_hda_codec_hdmi\n" {
		t.Errorf("the admin's override of the audio function = %q, want it back", got)
	}
	l, _ := LoadLedger(tr.Root)
	if len(l.Files) != 0 {
		t.Errorf("ledger keeps file records %v", l.Files)
	}
}

func TestUnbindPersistKeepsAdminOverride(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, audio := consumer(t, "")
	conf := "etc/driverctl.d/pci-" + audio.String()
	tr.WriteFile(conf, "vfio-pci\n") // driverctl set-override by the admin, identical to ours
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr.ReadFile(conf) != "vfio-pci\n" {
		t.Error("unbind --persist removed an override vgpu-host did not write")
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "kept /etc/driverctl.d/pci-"+audio.String()) {
		t.Errorf("no warning about the kept override: %v", res.Warnings)
	}
	if host.Exists(DriverctlPath(tr.Root, gpu)) {
		t.Error("the GPU override bind wrote is left behind")
	}
}

func TestUnbindPersistDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	tr, _, b, gpu, _ := consumer(t, "")
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	before := hosttest.State(t, tr.Dir())
	res, err := b.Unbind(ctx, []host.Address{gpu}, UnbindOptions{Persist: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, hosttest.State(t, tr.Dir())) {
		t.Fatal("unbind --persist --dry-run changed the tree")
	}
	removes := 0
	for _, s := range res.Steps {
		if s.Op == OpRemove {
			removes++
		}
	}
	if removes != 2 {
		t.Errorf("dry run plans %d removals, want the 2 overrides: %v", removes, res.Steps)
	}
}
