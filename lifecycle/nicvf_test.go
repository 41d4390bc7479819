package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestNICVF: an SR-IOV NIC VF as the guest's NIC (devices.nics[] type hostdev). plan refuses a
// VF still on its host driver (naming the fix), an address that is not a VF, and one that does
// not exist; a VF on vfio-pci becomes <interface type='hostdev' managed='no'> with its MAC, is
// claimed in the ledger, and a second VM asking for it is told who has it.
func TestNICVF(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	nic := hosttest.PCI{Addr: "0000:3b:00.0", Vendor: 0x8086, Device: 0x1592, Class: 0x020000, Driver: "ice"}
	pf := tr.SRIOVPF(nic, hosttest.VFSpec{Total: 4, VFDevice: 0x1889, VFDriver: "iavf"}, 2)
	vf0, vf1 := tr.VFAddress(pf, 0), tr.VFAddress(pf, 1)
	tr.Unbind(vf1)
	tr.Bind(vf1, "vfio-pci")
	conn := virt.NewFake("qemu")
	lc := New(Options{Root: tr.Root, Conn: conn, Host: newFakeHost(), Ledger: ledger.Open(tr.Root),
		Scan: func(r host.Root) (*host.Inventory, error) { return host.Scan(r) }})
	ctx := context.Background()
	withVF := func(name, vf string) *domains.VM {
		vm := spec(t, name, "")
		vm.Spec.Devices.NICs = []domains.NIC{{Type: "hostdev", VF: vf, MAC: "52:54:00:aa:bb:01"}}
		if err := vm.Validate(); err != nil {
			t.Fatal(err)
		}
		return vm
	}
	for _, c := range []struct {
		vf, want string
		is       error
	}{
		{vf0.String(), "VF " + vf0.String() + " is on iavf, not vfio-pci: run vgpu-host vf enable " + pf.String(), host.ErrRefused},
		{pf.String(), "is not an SR-IOV VF", host.ErrInvalid},
		{"0000:3b:0f.7", "no ", host.ErrNotFound},
	} {
		_, err := lc.Plan(ctx, []*domains.VM{withVF("vgpuhost-test-nic", c.vf)})
		if err == nil || !strings.Contains(err.Error(), "spec.devices.nics[0].vf: ") || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.is) {
			t.Errorf("VF %s: %v, want %q (%v)", c.vf, err, c.want, c.is)
		}
	}
	res, err := lc.Apply(ctx, withVF("vgpuhost-test-nic", vf1.String()))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := conn.DomainXML(ctx, "vgpuhost-test-nic")
	for _, want := range []string{`<interface type="hostdev" managed="no">`, `<mac address="52:54:00:aa:bb:01">`, `bus="0x3b"`} {
		if !strings.Contains(x, want) {
			t.Errorf("domain lacks %s:\n%s", want, x)
		}
	}
	if !strings.Contains(strings.Join(claimKeys(res.Claims), " "), "pci:"+vf1.String()) {
		t.Errorf("claims %v lack the VF", res.Claims)
	}
	_, err = lc.Plan(ctx, []*domains.VM{withVF("vgpuhost-test-nic2", vf1.String())})
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "vgpuhost-test-nic") {
		t.Errorf("a second VM for the same VF: %v, want busy naming the first", err)
	}
}

func claimKeys(cs []ledger.Claim) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Key())
	}
	return out
}
