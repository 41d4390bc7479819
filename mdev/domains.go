package mdev

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// DomainXMLLister lists the XML of every libvirt domain, defined or running, by name.
// virt.Conn satisfies it.
type DomainXMLLister interface {
	ListDomainXMLs(ctx context.Context) (map[string]string, error)
}

// LibvirtUsers implements DomainUsers over libvirt: a domain uses an mdev instance when its
// XML mentions the UUID (an <hostdev type='mdev'> source address), and a vendor-VFIO instance
// when it has a PCI hostdev whose source is the VF's address.
type LibvirtUsers struct {
	Conn DomainXMLLister
}

// DomainsUsing returns the names of the domains using in, sorted.
func (l LibvirtUsers) DomainsUsing(ctx context.Context, in Instance) ([]string, error) {
	xmls, err := l.Conn.ListDomainXMLs(ctx)
	if err != nil {
		return nil, fmt.Errorf("list libvirt domains: %w", err)
	}
	var out []string
	for name, x := range xmls {
		if domainUses(x, in) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func domainUses(x string, in Instance) bool {
	if in.VF == nil {
		return in.UUID != "" && strings.Contains(strings.ToLower(x), strings.ToLower(in.UUID))
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil || d.Devices == nil {
		// Unparsable XML: fall back to the address as libvirt would print it.
		return strings.Contains(x, fmt.Sprintf("bus='0x%02x' slot='0x%02x' function='0x%x'", in.VF.Bus, in.VF.Device, in.VF.Function))
	}
	for _, h := range d.Devices.Hostdevs {
		if h.SubsysPCI == nil || h.SubsysPCI.Source == nil || h.SubsysPCI.Source.Address == nil {
			continue
		}
		a := h.SubsysPCI.Source.Address
		if eq(a.Domain, uint(in.VF.Domain)) && eq(a.Bus, uint(in.VF.Bus)) && eq(a.Slot, uint(in.VF.Device)) && eq(a.Function, uint(in.VF.Function)) {
			return true
		}
	}
	return false
}

func eq(p *uint, v uint) bool {
	if p == nil {
		return v == 0
	}
	return *p == v
}
