package mdev

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vgpu-host/vgpu-host/vgpu"
	"github.com/vgpu-host/vgpu-host/virt"
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

// domainUses reports whether the domain XML x gives its guest the instance: an mdev hostdev
// with its UUID, or a PCI hostdev on its VF (virt.DomainHostdevs, the one reader of a domain's
// hostdevs; a UUID is matched parsed and whole, never as a substring). XML that does not parse is taken
// to use the instance when it mentions it, so a safety check never passes on a parse failure.
func domainUses(x string, in Instance) bool {
	hd, ok := virt.DomainHostdevs(x)
	if !ok {
		if in.VF == nil {
			return in.UUID != "" && strings.Contains(strings.ToLower(x), strings.ToLower(in.UUID))
		}
		return strings.Contains(x, fmt.Sprintf("bus='0x%02x' slot='0x%02x' function='0x%x'", in.VF.Bus, in.VF.Device, in.VF.Function))
	}
	if in.VF == nil {
		u, err := vgpu.ParseUUID(in.UUID)
		return err == nil && slices.Contains(hd.Mdevs, u)
	}
	return slices.Contains(hd.PCI, *in.VF)
}
