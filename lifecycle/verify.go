package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/digitalocean/go-qemu/qmp/raw"
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Check is one device verify looked for in the guest.
type Check struct {
	// Device is the libvirt device alias (the QEMU qdev id): "hostdev0", "video0".
	Device string `json:"device"`
	Kind   string `json:"kind"` // hostdev-pci, hostdev-mdev, virtio-gpu
	Source string `json:"source,omitempty"`
	Found  bool   `json:"found"`
	// Guest is where the guest sees it: "00:02.0 1af4:1050".
	Guest string `json:"guest,omitempty"`
}

// VerifyResult is what Verify saw.
type VerifyResult struct {
	VM     string  `json:"vm"`
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// ErrMissingInGuest is returned by Verify when an assigned device is not in the guest.
var ErrMissingInGuest = errors.New("assigned device not present in the guest")

type qmpReply struct {
	Return []raw.PCIInfo `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// guestPCI decodes a query-pci reply into the guest's PCI devices by qdev id, bridges walked.
func guestPCI(name, out string) (map[string]raw.PCIDeviceInfo, error) {
	var rep qmpReply
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return nil, fmt.Errorf("verify %s: decode query-pci reply: %w", name, err)
	}
	if rep.Error != nil {
		return nil, fmt.Errorf("verify %s: query-pci: %s: %s", name, rep.Error.Class, rep.Error.Desc)
	}
	guest := map[string]raw.PCIDeviceInfo{}
	var walk func(bus int64, devs []raw.PCIDeviceInfo)
	walk = func(bus int64, devs []raw.PCIDeviceInfo) {
		for _, dv := range devs {
			dv.Bus = bus
			if dv.QdevID != "" {
				guest[dv.QdevID] = dv
			}
			if dv.PCIBridge != nil {
				walk(dv.PCIBridge.Bus.Secondary, dv.PCIBridge.Devices)
			}
		}
	}
	for _, b := range rep.Return {
		walk(b.Bus, b.Devices)
	}
	return guest, nil
}

// expectedDevices lists what the guest must show: every hostdev of the domain (PCI by
// address, mdev by UUID) and every virtio video device, by their aliases. Every kind of GPU
// ends up as one of these in the domain, so one reading serves them all.
func expectedDevices(d *libvirtxml.Domain) []Check {
	var out []Check
	if d.Devices == nil {
		return out
	}
	for _, hd := range virt.HostdevsOf(d).Devices {
		c := Check{Device: hd.Alias, Kind: "hostdev-" + hd.Type, Source: hd.Mdev}
		if hd.PCI != nil {
			if hd.PCIComplete {
				c.Source = fmt.Sprintf("%02x:%02x.%x", hd.PCI.Bus, hd.PCI.Device, hd.PCI.Function)
			}
		}
		out = append(out, c)
	}
	for _, v := range d.Devices.Videos {
		if v.Model.Type != "virtio" {
			continue
		}
		c := Check{Kind: "virtio-gpu"}
		if v.Alias != nil {
			c.Device = v.Alias.Name
		}
		out = append(out, c)
	}
	return out
}

// Verify asks the running QEMU (QMP query-pci through libvirt) whether every hostdev and
// virtio GPU in the domain's live XML is on the guest's PCI buses, by its qdev id.
func (l *Lifecycle) Verify(ctx context.Context, name string) (*VerifyResult, error) {
	all, err := l.o.Conn.ListDomainXMLs(ctx)
	if err != nil {
		return nil, err
	}
	x, ok := all[name]
	if !ok {
		return nil, fmt.Errorf("verify %s: %w on %s: %w", name, virt.ErrNoDomain, l.o.Conn.URI(), host.ErrNotFound)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("verify %s: parse domain XML: %w", name, err)
	}
	out, err := l.o.Conn.QMP(ctx, name, `{"execute":"query-pci"}`)
	if err != nil {
		if st, serr := l.o.Conn.State(ctx, name); serr == nil && st != virt.StateRunning {
			return nil, fmt.Errorf("verify %s: the domain is %s: verify asks the running guest, so start it first (vgpu-host apply SPEC): %w", name, st, err)
		}
		return nil, fmt.Errorf("verify %s: %w", name, err)
	}
	guest, err := guestPCI(name, out)
	if err != nil {
		return nil, err
	}
	res := &VerifyResult{VM: name, OK: true, Checks: expectedDevices(&d)}
	for i := range res.Checks {
		c := &res.Checks[i]
		g, ok := guest[c.Device]
		if ok && c.Kind == "virtio-gpu" && (g.ID.Vendor != 0x1af4 || g.ID.Device != 0x1050) {
			ok = false
		}
		c.Found = ok && c.Device != ""
		if ok {
			c.Guest = fmt.Sprintf("%02x:%02x.%x %04x:%04x", g.Bus, g.Slot, g.Function, g.ID.Vendor, g.ID.Device)
		}
		res.OK = res.OK && c.Found
	}
	if len(res.Checks) == 0 {
		return res, fmt.Errorf("verify %s: the domain has no hostdev or virtio GPU to look for: %w", name, host.ErrNotFound)
	}
	if !res.OK {
		var missing []string
		for _, c := range res.Checks {
			if !c.Found {
				d := c.Device
				if d == "" {
					d = "(no alias)"
				}
				missing = append(missing, strings.TrimSpace(d+" ("+c.Kind+" "+c.Source)+")")
			}
		}
		return res, fmt.Errorf("verify %s: %s: %w", name, strings.Join(missing, ", "), ErrMissingInGuest)
	}
	return res, nil
}

// WaitShutdown waits until the domain is shut off (a builder VM powering itself off), or
// ctx ends. tick, when set, is called every poll with the time waited so far.
func (l *Lifecycle) WaitShutdown(ctx context.Context, name string, tick func(time.Duration)) error {
	start := time.Now()
	for {
		st, err := l.o.Conn.State(ctx, name)
		if err != nil {
			return err
		}
		if st == virt.StateShutoff || st == virt.StateCrashed {
			return nil
		}
		if tick != nil {
			tick(time.Since(start))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to shut down: %w", name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
