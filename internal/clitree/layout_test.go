package clitree

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/layout"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/virt"
)

const cliLayout = `apiVersion: vgpu-host/v1
kind: HostLayout
configs:
  desks:
    gpus:
      - select: {parent: mbochs}
        mode: mdev
        types: [{type: mbochs-medium, count: 2}]
      - select: {address: "0000:01:00.0"}
        mode: passthrough
  clear:
    gpus:
      - select: {all: true}
        mode: host
  train:
    gpus:
      - select: {address: "0000:01:00.0"}
        mode: mig
        profiles: [{profile: 1g.10gb, count: 7}]
`

func layoutFixture(t *testing.T) (*hosttest.Tree, *hosttest.Kernel, string, []string) {
	t.Helper()
	tr := hosttest.New(t)
	tr.ConsumerGPU("0000:00:04.0", "0000:01:00.0", "")
	tr.Mbochs()
	k := withKernel(t, tr)
	f := filepath.Join(t.TempDir(), "layout.yaml")
	if err := os.WriteFile(f, []byte(cliLayout), 0o644); err != nil {
		t.Fatal(err)
	}
	return tr, k, f, []string{"--host-root", tr.Dir()}
}

// TestLayoutCLI: --config is needed with several configurations (exit 2); the dry run prints
// the exact writes and the files, changing nothing; apply then plan says nothing to do; show
// prints a layout that parses; show --selected names the configuration; mig without NVML is
// exit 7.
func TestLayoutCLI(t *testing.T) {
	t.Parallel()
	tr, k, f, g := layoutFixture(t)
	if _, err := runErr(t, append(g, "host", "layout", "plan", f)...); exitCode(err) != 2 || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("plan without --config: exit %d: %v", exitCode(err), err)
	}
	out, code := run(t, append(g, "host", "layout", "plan", f, "--config", "desks")...)
	if code != 0 || !strings.Contains(out, "create-mdev  mbochs        2× mbochs-medium") || !strings.Contains(out, "bind         0000:01:00.0") {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	out, code = run(t, append(g, "host", "layout", "apply", f, "--config", "desks", "--dry-run")...)
	if code != 0 || strings.Count(out, "mbochs-medium/create") != 2 || !strings.Contains(out, "0000:01:00.1/driver_override") ||
		!strings.Contains(out, "# and write ") || !strings.Contains(out, "layout.json") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if len(k.Writes()) != 0 {
		t.Fatalf("dry run wrote %v", k.Writes())
	}
	var dryUUIDs []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, "mbochs-medium/create") {
			dryUUIDs = append(dryUUIDs, strings.Fields(line)[1])
		}
	}
	out, code = run(t, append(g, "-o", "json", "host", "layout", "apply", f, "--config", "desks")...)
	var res layout.HostApplyResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Done) != 2 || len(res.Done[0].Created) != 2 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	if strings.Join(res.Done[0].Created, " ") != strings.Join(dryUUIDs, " ") {
		t.Fatalf("apply created %v, the dry run said %v", res.Done[0].Created, dryUUIDs)
	}
	if out, code := run(t, append(g, "host", "layout", "plan", f, "--config", "desks")...); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("plan after apply: exit %d\n%s", code, out)
	}
	out, code = run(t, append(g, "host", "layout", "show")...)
	if code != 0 {
		t.Fatalf("show: exit %d\n%s", code, out)
	}
	shown := filepath.Join(t.TempDir(), "shown.yaml")
	os.WriteFile(shown, []byte(out), 0o644)
	if out, code := run(t, append(g, "host", "layout", "plan", shown)...); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("plan of show's output: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "-o", "json", "host", "layout", "show")...); code != 0 || !strings.Contains(out, `"apiVersion": "vgpu-host/v1"`) {
		t.Fatalf("show json: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "show", "--selected")...); code != 0 || !strings.Contains(out, `configuration "desks"`) || !strings.Contains(out, "kind: HostLayout") {
		t.Fatalf("show --selected: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "plan", f, "--config", "train")...); code != 7 || !strings.Contains(out, "NVML is not available") {
		t.Fatalf("mig without NVML: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "apply", f, "--config", "clear", "--force", "nonsense")...); code != 2 {
		t.Fatalf("--force nonsense: exit %d\n%s", code, out)
	}
	if out, code := run(t, append(g, "host", "layout", "apply", f, "--config", "clear")...); code != 0 || tr.Driver(host.MustParseAddress("0000:01:00.1")) != "snd_hda_intel" {
		t.Fatalf("clear: exit %d\n%s", code, out)
	}
}

// TestLayoutRefusesRunningVM: a layout that would remove an mdev the allocation ledger gives to
// a VM running in libvirt exits 4 naming the VM and writes nothing; without the ledger entry,
// libvirt's running domain alone refuses it the same way; --force in-use goes past.
func TestLayoutRefusesRunningVM(t *testing.T) {
	t.Parallel()
	tr, k, f, g := layoutFixture(t)
	if out, code := run(t, append(g, "host", "layout", "apply", f, "--config", "desks")...); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	m := mdev.New(tr.Root, k)
	ins, err := m.Instances()
	if err != nil || len(ins) != 2 {
		t.Fatalf("instances %v %v", ins, err)
	}
	uri := virt.FileScheme + "://" + filepath.Join(t.TempDir(), "libvirt.json")
	conn, err := virt.OpenFile(uri)
	if err != nil {
		t.Fatal(err)
	}
	x := `<domain type="qemu"><name>desk1</name><memory unit="MiB">256</memory><os><type>hvm</type></os><devices>` +
		`<hostdev mode="subsystem" type="mdev" model="vfio-pci"><source><address uuid="` + ins[0].UUID + `"/></source></hostdev></devices></domain>`
	if _, err := conn.Define(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	if err := conn.Start(t.Context(), "desk1"); err != nil {
		t.Fatal(err)
	}
	// The libvirt domain alone.
	w := len(k.Writes())
	out, code := run(t, append(g, "host", "layout", "apply", f, "--config", "clear", "--connect", uri)...)
	if code != 4 || !strings.Contains(out, "desk1") || len(k.Writes()) != w {
		t.Fatalf("clear under a running domain: exit %d, %d writes\n%s", code, len(k.Writes())-w, out)
	}
	// The allocation ledger too: it names the VM first.
	err = ledger.Open(tr.Root).Update(func(b *ledger.Book) error {
		return b.Claim("desk1", ledger.Claim{Kind: ledger.KindMdev, ID: ins[0].UUID})
	})
	if err != nil {
		t.Fatal(err)
	}
	out, code = run(t, append(g, "host", "layout", "plan", f, "--config", "clear", "--connect", uri)...)
	if code != 4 || !strings.Contains(out, `allocation ledger gives it to VM "desk1"`) || !strings.Contains(out, "[in-use]") {
		t.Fatalf("plan under an allocated, running VM: exit %d\n%s", code, out)
	}
	if _, code := run(t, append(g, "host", "layout", "apply", f, "--config", "clear", "--connect", uri)...); code != 4 || len(k.Writes()) != w {
		t.Fatalf("apply: exit %d, %d writes", code, len(k.Writes())-w)
	}
	if out, code := run(t, append(g, "host", "layout", "apply", f, "--config", "clear", "--connect", uri, "--force", "in-use")...); code != 0 {
		t.Fatalf("--force in-use: exit %d\n%s", code, out)
	}
}

// TestLayoutRefusesQuarantinedParent: a layout that would create mdev instances on a
// quarantined GPU is refused by plan and apply with exit 4, naming the record and the fix, and
// creates nothing (mdev create's one quarantine check, docs/health.md).
func TestLayoutRefusesQuarantinedParent(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	a100 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(a100)
	k := withKernel(t, tr)
	f := filepath.Join(t.TempDir(), "layout.yaml")
	os.WriteFile(f, []byte("apiVersion: vgpu-host/v1\nkind: HostLayout\nconfigs:\n  desks:\n    gpus:\n      - select: {address: \"0000:41:00.0\"}\n        mode: mdev\n        types: [{type: A100-4C, count: 2}]\n"), 0o644)
	q := &host.Quarantine{Address: a100, Problems: []host.Problem{{Check: host.HealthXid, Detail: "NVIDIA Xid 79"}}, Since: time.Now(), Op: "destroy vm"}
	if err := host.SaveQuarantine(tr.Root, q); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"plan", "apply"} {
		out, err := runErr(t, "--host-root", tr.Dir(), "host", "layout", verb, f)
		out += fmt.Sprint(err)
		if exitCode(err) != exitRefused || !strings.Contains(out, "[quarantined]") || !strings.Contains(out, "quarantine/0000:41:00.0.json") || !strings.Contains(out, "release-quarantine") {
			t.Fatalf("layout %s on a quarantined parent: exit %d\n%s", verb, exitCode(err), out)
		}
	}
	for _, w := range k.Writes() {
		if strings.Contains(w.Path, "/create") {
			t.Errorf("created despite the quarantine: %v", w)
		}
	}
}
