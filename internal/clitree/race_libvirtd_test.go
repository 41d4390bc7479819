package clitree

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/testenv"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/lifecycle"
)

// preboundGPUs adds n consumer GPUs (VGA + HDMI audio, one IOMMU group each) on buses bus,
// bus+1, ... whose groups
// are already on vfio-pci, as on a host booted with vfio-pci.ids=: the group is viable and
// /dev/vfio/N exists, so binding it is a no-op that writes nothing to sysfs. It returns the
// GPU addresses and, per GPU, its functions. Tests on the shared libvirtd use buses of their
// own: vgpu-host treats hostdevs of domains it did not create (another test's, in another
// ledger) as taken.
func preboundGPUs(t *testing.T, tr *hosttest.Tree, bus, n int) (gpus []host.Address, funcs map[host.Address][]host.Address) {
	t.Helper()
	funcs = map[host.Address][]host.Address{}
	for i := 0; i < n; i++ {
		gpu, audio := tr.ConsumerGPU(fmt.Sprintf("0000:00:%02x.0", i+1), fmt.Sprintf("0000:%02x:00.0", bus+i), "vfio-pci")
		tr.Unbind(audio)
		tr.Bind(audio, "vfio-pci")
		tr.WriteFile(filepath.Join("dev/vfio", strconv.Itoa(tr.Group(gpu))), "")
		gpus = append(gpus, gpu)
		funcs[gpu] = []host.Address{gpu, audio}
	}
	return gpus, funcs
}

// sysfsPrint fingerprints every entry under ROOT/sys and ROOT/dev: symlink targets, file
// contents and modification times. Any sysfs write (driver_override, unbind, drivers_probe,
// new_id, ...) changes it.
func sysfsPrint(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, top := range []string{"sys", "dev"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				l, err := os.Readlink(p)
				if err != nil {
					return err
				}
				out[rel] = "-> " + l
			case d.Type().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				info, err := d.Info()
				if err != nil {
					return err
				}
				s := sha256.Sum256(b)
				out[rel] = hex.EncodeToString(s[:8]) + " " + info.ModTime().String()
			case d.IsDir():
				out[rel] = "dir"
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// diffPrints lists the entries that differ between two fingerprints.
func diffPrints(a, b map[string]string) []string {
	var d []string
	for k, v := range a {
		if b[k] != v {
			d = append(d, fmt.Sprintf("%s: %q -> %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			d = append(d, fmt.Sprintf("%s: new %q", k, v))
		}
	}
	sort.Strings(d)
	return d
}

// domainsWithPrefix lists the libvirt domains (all states) whose name starts with prefix.
func domainsWithPrefix(t *testing.T, uri, prefix string) []string {
	t.Helper()
	out, err := virsh(uri, "list", "--all", "--name")
	if err != nil {
		t.Fatalf("virsh list: %v\n%s", err, out)
	}
	var names []string
	for _, l := range strings.Fields(out) {
		if strings.HasPrefix(l, prefix) {
			names = append(names, l)
		}
	}
	sort.Strings(names)
	return names
}

// hostdevsOf returns the PCI source addresses of the <hostdev>s in a domain's XML.
func hostdevsOf(t *testing.T, x string) []string {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatalf("parse domain XML: %v\n%s", err, x)
	}
	var out []string
	if d.Devices == nil {
		return nil
	}
	for _, hd := range d.Devices.Hostdevs {
		if s := hd.SubsysPCI; s != nil && s.Source != nil && s.Source.Address != nil {
			a := s.Source.Address
			out = append(out, host.Address{Domain: uint32(*a.Domain), Bus: uint8(*a.Bus), Device: uint8(*a.Slot), Function: uint8(*a.Function)}.String())
		}
	}
	sort.Strings(out)
	return out
}

type procResult struct {
	code           int
	stdout, stderr string
}

// runProcs runs the argument lists as separate vgpu-host processes, all started before the
// first is waited for, and returns their exit codes and output in order.
func runProcs(t *testing.T, bin string, argss [][]string) []procResult {
	t.Helper()
	res := make([]procResult, len(argss))
	cmds := make([]*exec.Cmd, len(argss))
	outs := make([]*bytes.Buffer, len(argss))
	errs := make([]*bytes.Buffer, len(argss))
	for i, args := range argss {
		cmds[i] = exec.Command(bin, args...)
		outs[i], errs[i] = &bytes.Buffer{}, &bytes.Buffer{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], errs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmds[i].Wait()
			var ee *exec.ExitError
			switch {
			case err == nil:
			case errors.As(err, &ee):
				res[i].code = ee.ExitCode()
			default:
				res[i].code = -1
				errs[i].WriteString(err.Error())
			}
		}()
	}
	wg.Wait()
	for i := range res {
		res[i].stdout, res[i].stderr = outs[i].String(), errs[i].String()
	}
	return res
}

// TestRace16ProcessesFor4GPUsLibvirtd starts 16 `vgpu-host apply` processes at once, each for
// its own VM asking for one GPU by selector with no fallback, on a host with 4 GPUs, against
// the real libvirtd: exactly 4 win (exit 0), 12 are refused busy (exit 5) with a message that
// says why; the ledger gives 4 distinct GPUs to 4 distinct VMs, libvirt has exactly those 4
// domains, each with the hostdevs its ledger entry names. The GPUs' groups are on vfio-pci
// already, so nothing writes to the (fake) sysfs; 4 racing destroys then leave nothing.
func TestRace16ProcessesFor4GPUsLibvirtd(t *testing.T) {
	uri := testenv.Libvirtd(t)
	bin := binary(t)
	tr := hosttest.New(t)
	gpus, funcs := preboundGPUs(t, tr, 0x61, 4)
	pool := lifecycle.PoolName(tr.Root)
	const prefix = "vgpuhost-test-race-"
	t.Cleanup(func() {
		for _, n := range domainsWithPrefix(t, uri, prefix) {
			virsh(uri, "destroy", n)
			virsh(uri, "undefine", n, "--nvram")
		}
		virsh(uri, "pool-destroy", pool)
		virsh(uri, "pool-undefine", pool)
	})

	specDir := t.TempDir()
	var applies [][]string
	for i := 0; i < 16; i++ {
		name := prefix + strconv.Itoa(i)
		s := "apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: " + name + "\nspec:\n" +
			"  vcpus: 1\n  memory: 128MiB\n  firmware: bios\n  network:\n    type: none\n  graphics:\n    type: vnc\n" +
			"  cloudInit:\n    userData: |\n      #cloud-config\n      runcmd: [poweroff]\n" +
			"  gpus:\n    - passthrough:\n        vendor: \"10de\"\n        count: 1\n"
		p := filepath.Join(specDir, name+".yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		applies = append(applies, []string{"--host-root", tr.Dir(), "-o", "json", "apply", "--connect", uri, "--virt-type", "qemu", "--no-start", p})
	}
	before := sysfsPrint(t, tr.Dir())

	res := runProcs(t, bin, applies)
	var winners []string
	won := map[string][]ledger.Claim{} // VM -> claims apply reported
	losers := map[string]string{}      // VM -> its stderr
	for i, r := range res {
		name := prefix + strconv.Itoa(i)
		switch r.code {
		case exitOK:
			winners = append(winners, name)
			var out []lifecycle.VMApplyResult
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out) != 1 || out[0].VM != name || !out[0].Changed || out[0].State != "shutoff" {
				t.Fatalf("%s won but printed (%v):\n%s", name, err, r.stdout)
			}
			won[name] = out[0].Claims
		case exitBusy:
			losers[name] = r.stderr
		default:
			t.Errorf("%s: exit %d, want 0 or 5\nstdout:\n%s\nstderr:\n%s", name, r.code, r.stdout, r.stderr)
		}
	}
	sort.Strings(winners)
	if len(winners) != 4 {
		t.Fatalf("%d applies won (%v), want 4", len(winners), winners)
	}
	if len(losers) != 12 {
		t.Fatalf("%d applies refused busy, want 12", len(losers))
	}
	// Each refusal names the VM, what it asked for, that nothing is free and who holds the GPUs.
	for name, msg := range losers {
		if !strings.Contains(msg, "apply "+name+":") || !strings.Contains(msg, "selector vendor=10de matches 4 GPUs but only 0 are free") ||
			!strings.Contains(msg, "allocated to VMs "+strings.Join(winners, ", ")) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%s: exit 5 without a clear message:\n%s", name, msg)
		}
	}
	t.Logf("winners %v; %s", winners, strings.TrimSpace(losers[slices.Sorted(maps.Keys(losers))[0]]))

	// The ledger: 4 applied VMs, each holding one whole GPU (VGA + audio), no GPU twice.
	book, err := ledger.Open(tr.Root).Read()
	if err != nil {
		t.Fatal(err)
	}
	if got := book.Names(); !slices.Equal(got, winners) {
		t.Fatalf("ledger VMs %v, want the winners %v", got, winners)
	}
	holder := map[string]string{} // function -> VM
	for _, name := range winners {
		e := book.VM(name)
		if e.Phase != ledger.PhaseApplied {
			t.Errorf("%s: phase %s", name, e.Phase)
		}
		var ids []string
		for _, c := range e.Claims {
			if c.Kind != ledger.KindPCI {
				t.Errorf("%s: unexpected claim %+v", name, c)
			}
			if h, dup := holder[c.ID]; dup {
				t.Fatalf("%s is claimed by both %s and %s", c.ID, h, name)
			}
			holder[c.ID] = name
			ids = append(ids, c.ID)
		}
		sort.Strings(ids)
		if len(ids) != 2 || !sameClaimIDs(won[name], ids) {
			t.Errorf("%s: ledger claims %v, apply reported %+v", name, ids, won[name])
		}
		gpu := host.MustParseAddress(ids[0])
		if !slices.Equal(addrStrings(funcs[gpu]), ids) {
			t.Errorf("%s: claims %v are not one GPU with its audio function", name, ids)
		}

		// libvirt: the domain is defined and its hostdevs are exactly what the ledger says.
		x, err := virsh(uri, "dumpxml", "--inactive", name)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, x)
		}
		if hd := hostdevsOf(t, x); !slices.Equal(hd, ids) {
			t.Errorf("%s: domain hostdevs %v, ledger %v", name, hd, ids)
		}
	}
	if len(holder) != 2*len(gpus) {
		t.Errorf("%d functions claimed, want %d", len(holder), 2*len(gpus))
	}
	if got := domainsWithPrefix(t, uri, prefix); !slices.Equal(got, winners) {
		t.Fatalf("libvirt has domains %v, want exactly %v", got, winners)
	}
	if seeds, _ := filepath.Glob(filepath.Join(tr.Root.StateDir("images"), prefix+"*")); len(seeds) != 4 {
		t.Errorf("seed volumes %v, want one per winner", seeds)
	}
	if d := diffPrints(before, sysfsPrint(t, tr.Dir())); len(d) > 0 {
		t.Errorf("binding groups already on vfio-pci changed sysfs:\n%s", strings.Join(d, "\n"))
	}

	// 16 racing destroys: the winners' succeed, the losers' say "not found".
	var destroys [][]string
	for i := 0; i < 16; i++ {
		destroys = append(destroys, []string{"--host-root", tr.Dir(), "-o", "json", "destroy", "--connect", uri, prefix + strconv.Itoa(i)})
	}
	for i, r := range runProcs(t, bin, destroys) {
		name := prefix + strconv.Itoa(i)
		want := exitNotFound
		if slices.Contains(winners, name) {
			want = exitOK
		}
		if r.code != want {
			t.Errorf("destroy %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", name, r.code, want, r.stdout, r.stderr)
		}
	}
	if got := domainsWithPrefix(t, uri, prefix); len(got) > 0 {
		t.Errorf("domains left: %v", got)
	}
	if vols, _ := filepath.Glob(filepath.Join(tr.Root.StateDir("images"), "*")); len(vols) > 0 {
		t.Errorf("volumes left: %v", vols)
	}
	if out, err := virsh(uri, "vol-list", pool); err != nil || strings.Contains(out, prefix) {
		t.Errorf("pool %s still lists volumes (%v):\n%s", pool, err, out)
	}
	book, err = ledger.Open(tr.Root).Read()
	if err != nil {
		t.Fatal(err)
	}
	if book.Len() != 0 {
		t.Errorf("ledger entries left: %+v", book.Names())
	}
	// Destroy undoes only what apply did: groups that were on vfio-pci before stay there.
	if d := diffPrints(before, sysfsPrint(t, tr.Dir())); len(d) > 0 {
		t.Errorf("destroy changed sysfs of groups apply did not bind:\n%s", strings.Join(d, "\n"))
	}
	for _, g := range gpus {
		for _, f := range funcs[g] {
			if d := tr.Driver(f); d != "vfio-pci" {
				t.Errorf("%s is on %q after destroy, want vfio-pci as before apply", f, d)
			}
		}
	}
}

func addrStrings(as []host.Address) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	sort.Strings(out)
	return out
}

func sameClaimIDs(cs []ledger.Claim, ids []string) bool {
	var got []string
	for _, c := range cs {
		got = append(got, c.ID)
	}
	sort.Strings(got)
	return slices.Equal(got, ids)
}
