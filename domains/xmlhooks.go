package domains

import (
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"

	"libvirt.org/go/libvirtxml"
)

// xmlHooks are the libvirtxml types whose MarshalXML the planned writer (xmlenc.go) mirrors:
// the 20 that the domains vgpu-host builds contain, written here from libvirtxml v1.11006.0's
// domain.go. Each is held against the method itself on random values by
// TestXMLEncMatchesEncodingXML, so a libvirtxml update that changes one fails that test; a
// hook whose fields are missing (renamed in an update) is left out, and encoding/xml runs the
// method. Built on first use, not at init.
func xmlHooks() map[reflect.Type]xmlHook {
	hooksOnce.Do(func() { hooks = makeHooks() })
	return hooks
}

var (
	hooksOnce sync.Once
	hooks     map[reflect.Type]xmlHook
)

func makeHooks() map[reflect.Type]xmlHook {
	m := map[reflect.Type]xmlHook{}
	add := func(t reflect.Type, h xmlHook, ok bool) {
		if ok && h != nil {
			m[t] = h
		}
	}
	add(hookUnion[libvirtxml.DomainAddress]("", "type", []string{
		"USB", "usb", "PCI", "pci", "Drive", "drive", "DIMM", "dimm", "ISA", "isa",
		"VirtioMMIO", "virtio-mmio", "CCW", "ccw", "VirtioSerial", "virtio-serial",
		"SpaprVIO", "spapr-vio", "CCID", "ccid", "VirtioS390", "virtio-s390", "Unassigned", "unassigned"}, nil))
	add(hookAddressPCI())
	add(hookTyped[libvirtxml.DomainDisk]("disk", "Source", []string{
		"File", "file", "Block", "block", "Dir", "dir", "Network", "network", "Volume", "volume",
		"NVME", "nvme", "VHostUser", "vhostuser", "VHostVDPA", "vhostvdpa"}))
	add(hookTyped[libvirtxml.DomainDiskBackingStore]("backingStore", "Source", []string{
		"File", "file", "Block", "block", "Dir", "dir", "Network", "network", "Volume", "volume",
		"VHostUser", "vhostuser", "VHostVDPA", "vhostvdpa"}))
	add(hookDiskSource())
	add(hookController())
	add(hookTyped[libvirtxml.DomainInterface]("interface", "Source", []string{
		"User", "user", "Ethernet", "ethernet", "VHostUser", "vhostuser", "Server", "server",
		"Client", "client", "MCast", "mcast", "Network", "network", "Bridge", "bridge",
		"Internal", "internal", "Direct", "direct", "Hostdev", "hostdev", "UDP", "udp",
		"VDPA", "vdpa", "Null", "null", "VDS", "vds"}))
	add(hookUnion[libvirtxml.DomainInterfaceSource]("", "", []string{
		"User", "", "Ethernet", "", "VHostUser", "", "Server", "", "Client", "", "MCast", "",
		"Network", "", "Bridge", "", "Internal", "", "Direct", "", "Hostdev", "", "UDP", "",
		"VDPA", "", "Null", "", "VDS", ""}, func(name string, v reflect.Value) bool {
		switch name {
		case "User":
			return v.Interface().(*libvirtxml.DomainInterfaceSourceUser).Dev != ""
		case "Ethernet":
			eth := v.Interface().(*libvirtxml.DomainInterfaceSourceEthernet)
			return len(eth.IP) > 0 && len(eth.Route) > 0
		}
		return true
	}))
	for _, c := range []struct {
		t    reflect.Type
		name string
	}{
		{reflect.TypeFor[libvirtxml.DomainChannel](), "channel"},
		{reflect.TypeFor[libvirtxml.DomainConsole](), "console"},
		{reflect.TypeFor[libvirtxml.DomainSerial](), "serial"},
	} {
		add(hookChardev(c.t, c.name))
	}
	add(hookChardevSource())
	add(hookUnion[libvirtxml.DomainChannelTarget]("", "type", []string{
		"VirtIO", "virtio", "Xen", "xen", "GuestFWD", "guestfwd"}, nil))
	add(reflect.TypeFor[libvirtxml.DomainInput](), func(e *xmlEnc, v reflect.Value, _ string, pairs []string) error {
		return e.alias(v, "input", pairs)
	}, true)
	add(hookInputSource())
	add(hookGraphic())
	add(hookUnion[libvirtxml.DomainGraphicListener]("listen", "type", []string{
		"Address", "address", "Network", "network", "Socket", "socket"}, nil))
	add(hookHostdev())
	add(hookUnion[libvirtxml.DomainRNGBackend]("", "model", []string{
		"Random", "random", "EGD", "egd", "BuiltIn", "builtin"}, nil))
	add(hookUnion[libvirtxml.DomainTPMBackend]("backend", "type", []string{
		"Passthrough", "passthrough", "Emulator", "emulator", "External", "external"}, nil))
	return m
}

// fields returns the indexes of t's named fields; ok is false when one is missing.
func fields(t reflect.Type, names ...string) (idx []int, ok bool) {
	for _, n := range names {
		f, found := t.FieldByName(n)
		if !found || len(f.Index) != 1 {
			return nil, false
		}
		idx = append(idx, f.Index[0])
	}
	return idx, true
}

// union is a libvirtxml union: member fields (pointers) with the value each gives an
// attribute; the first member set wins.
type union struct {
	idx    []int
	vals   []string
	names  []string
	caches []*atomic.Pointer[planCache] // each member's plan
	typed  [][]string                   // each member's {"type", value}
}

// typedPairs is pairs plus attr="the value of member i", without allocating for the usual
// type attribute and no template.
func (u union) typedPairs(i int, attr string, pairs []string) []string {
	if len(pairs) == 0 && attr == "type" {
		return u.typed[i]
	}
	return with(pairs, attr, u.vals[i])
}

func newUnion(t reflect.Type, pairs []string) (union, bool) {
	var u union
	for i := 0; i+1 < len(pairs); i += 2 {
		u.names = append(u.names, pairs[i])
		u.vals = append(u.vals, pairs[i+1])
	}
	idx, ok := fields(t, u.names...)
	u.idx = idx
	for i := range idx {
		u.caches = append(u.caches, new(atomic.Pointer[planCache]))
		u.typed = append(u.typed, []string{"type", u.vals[i]})
	}
	return u, ok
}

// first returns the position of the first member set in v, or -1.
func (u union) first(v reflect.Value) int {
	for i, x := range u.idx {
		if !v.Field(x).IsNil() {
			return i
		}
	}
	return -1
}

// with returns pairs plus one attribute.
func with(pairs []string, name, value string) []string {
	out := make([]string, 0, len(pairs)+2)
	return append(append(out, pairs...), name, value)
}

// hookUnion mirrors a MarshalXML that renames the element (rename "" keeps it), adds attr with
// the first set member's value (attr "": none) and writes that member in the element's place;
// with no member set it writes nothing, except DomainGraphicListener, which writes an empty
// element typed "none". cond, when set, can make a set member write nothing.
func hookUnion[T any](rename, attr string, members []string, cond func(member string, v reflect.Value) bool) (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[T]()
	u, ok := newUnion(t, members)
	listener := t == reflect.TypeFor[libvirtxml.DomainGraphicListener]()
	return t, func(e *xmlEnc, v reflect.Value, name string, pairs []string) error {
		if rename != "" {
			name = rename
		}
		i := u.first(v)
		if i < 0 {
			if listener {
				e.open(name)
				e.pairs(pairs)
				e.attr(attr, "none")
				e.closeStart()
				e.end(name)
			}
			return nil
		}
		mv := v.Field(u.idx[i])
		if cond != nil && !cond(u.names[i], mv) {
			return nil
		}
		if attr != "" {
			pairs = u.typedPairs(i, attr, pairs)
		}
		return e.valueAs(mv, name, false, true, pairs, true, u.caches[i])
	}, ok
}

// composable reports whether a struct embedded in one of libvirtxml's composite structs is
// written field by field there: its own MarshalXML (or MarshalText) would be promoted to the
// composite and write it all.
func composable(t reflect.Type) bool {
	p := planOf(t)
	return p.generic && p.marshal == marshalNone && !p.text
}

// alias writes v as EncodeElement(alias(*v), start) does in a MarshalXML: v's fields, v's
// methods aside, the struct passed by value.
func (e *xmlEnc) alias(v reflect.Value, name string, pairs []string) error {
	if !planOf(v.Type()).generic {
		return errNoHook
	}
	return e.element(name, pairs, false, v)
}

// hookTyped mirrors DomainDisk's, DomainDiskBackingStore's and DomainInterface's MarshalXML:
// renamed, typed by the first member set in the source (a union field), written as its alias.
func hookTyped[T any](rename, source string, members []string) (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[T]()
	src, ok1 := fields(t, source)
	if !ok1 {
		return t, nil, false
	}
	u, ok := newUnion(t.Field(src[0]).Type.Elem(), members)
	return t, func(e *xmlEnc, v reflect.Value, _ string, pairs []string) error {
		if s := v.Field(src[0]); !s.IsNil() {
			if i := u.first(s.Elem()); i >= 0 {
				pairs = u.typedPairs(i, "type", pairs)
			}
		}
		return e.alias(v, rename, pairs)
	}, ok
}

// hookAddressPCI mirrors DomainAddressPCI's MarshalXML: hexadecimal attributes.
func hookAddressPCI() (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[libvirtxml.DomainAddressPCI]()
	return t, func(e *xmlEnc, v reflect.Value, name string, pairs []string) error {
		a := v.Addr().Interface().(*libvirtxml.DomainAddressPCI)
		e.open(name)
		e.pairs(pairs)
		e.hexAttr("domain", a.Domain, 4)
		e.hexAttr("bus", a.Bus, 2)
		e.hexAttr("slot", a.Slot, 2)
		e.hexAttr("function", a.Function, 0)
		if a.MultiFunction != "" {
			e.attr("multifunction", a.MultiFunction)
		}
		e.closeStart()
		if a.ZPCI != nil {
			if err := e.valueAs(reflect.ValueOf(a.ZPCI), "zpci", false, true, nil, true, nil); err != nil {
				return err
			}
		}
		e.end(name)
		return nil
	}, true
}

// hexAttr is libvirtxml's marshalUintAttr with "0x%0Nx".
func (e *xmlEnc) hexAttr(name string, v *uint, width int) {
	if v == nil {
		return
	}
	e.b = append(e.b, ' ')
	e.b = append(e.b, name...)
	e.b = append(e.b, `="0x`...)
	var buf [20]byte
	h := strconv.AppendUint(buf[:0], uint64(*v), 16)
	for i := len(h); i < width; i++ {
		e.b = append(e.b, '0')
	}
	e.b = append(e.b, h...)
	e.b = append(e.b, '"')
}

// hookDiskSource mirrors DomainDiskSource's MarshalXML: the member's fields, then the
// source's, in one element (&struct{Member; source}); some members write nothing when empty.
func hookDiskSource() (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[libvirtxml.DomainDiskSource]()
	u, ok := newUnion(t, []string{"File", "", "Block", "", "Dir", "", "Network", "", "Volume", "",
		"NVME", "", "VHostUser", "", "VHostVDPA", ""})
	return t, func(e *xmlEnc, v reflect.Value, name string, pairs []string) error {
		a := v.Addr().Interface().(*libvirtxml.DomainDiskSource)
		i := u.first(v)
		if i < 0 {
			return nil
		}
		mv := v.Field(u.idx[i]).Elem()
		plain := a.StartupPolicy == "" && a.Encryption == nil
		switch u.names[i] {
		case "File":
			if plain && a.File.File == "" {
				return nil
			}
		case "Block":
			if plain && a.Block.Dev == "" {
				return nil
			}
		case "Volume":
			if plain && a.Volume.Pool == "" && a.Volume.Volume == "" {
				return nil
			}
		case "NVME":
			if a.NVME.PCI == nil {
				return nil
			}
			mv = reflect.ValueOf(a.NVME.PCI).Elem()
			pairs = with(pairs, "type", "pci")
		}
		if !composable(mv.Type()) || !planOf(t).generic {
			return errNoHook
		}
		return e.element(name, pairs, true, mv, v)
	}, ok
}

// hookController mirrors DomainController's MarshalXML: for the types with a model part, that
// part's fields (zero when unset) before the controller's, the struct passed by value.
func hookController() (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[libvirtxml.DomainController]()
	parts, ok := fields(t, "PCI", "USB", "VirtIOSerial", "XenBus", "NVME")
	types := []string{"pci", "usb", "virtio-serial", "xenbus", "nvme"}
	return t, func(e *xmlEnc, v reflect.Value, _ string, pairs []string) error {
		typ := v.Addr().Interface().(*libvirtxml.DomainController).Type
		for i, ty := range types {
			if typ != ty {
				continue
			}
			pv := v.Field(parts[i])
			part := reflect.Zero(pv.Type().Elem())
			if !pv.IsNil() {
				part = pv.Elem()
			}
			if !composable(part.Type()) || !planOf(t).generic {
				return errNoHook
			}
			return e.element("controller", pairs, false, part, v)
		}
		return e.alias(v, "controller", pairs)
	}, ok
}

// hookChardev mirrors DomainChannel's, DomainConsole's and DomainSerial's MarshalXML: typed by
// the source (getChardevSourceType), written as the alias.
func hookChardev(t reflect.Type, rename string) (reflect.Type, xmlHook, bool) {
	src, ok := fields(t, "Source")
	if !ok {
		return t, nil, false
	}
	u, ok := newUnion(t.Field(src[0]).Type.Elem(), chardevTypes)
	return t, func(e *xmlEnc, v reflect.Value, _ string, pairs []string) error {
		if s := v.Field(src[0]); !s.IsNil() {
			if i := u.first(s.Elem()); i >= 0 {
				pairs = u.typedPairs(i, "type", pairs)
			}
		}
		return e.alias(v, rename, pairs)
	}, ok
}

// chardevTypes are DomainChardevSource's members in getChardevSourceType's order.
var chardevTypes = []string{"Null", "null", "VC", "vc", "Pty", "pty", "Dev", "dev", "File", "file",
	"Pipe", "pipe", "StdIO", "stdio", "UDP", "udp", "TCP", "tcp", "UNIX", "unix",
	"SpiceVMC", "spicevmc", "SpicePort", "spiceport", "NMDM", "nmdm",
	"QEMUVDAgent", "qemu-vdagent", "DBus", "dbus"}

// hookChardevSource mirrors DomainChardevSource's MarshalXML: the member in the source's
// place; some members write nothing, UDP writes a bind and a connect source.
func hookChardevSource() (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[libvirtxml.DomainChardevSource]()
	u, ok := newUnion(t, chardevTypes)
	return t, func(e *xmlEnc, v reflect.Value, name string, pairs []string) error {
		a := v.Addr().Interface().(*libvirtxml.DomainChardevSource)
		i := u.first(v)
		if i < 0 {
			return nil
		}
		switch u.names[i] {
		case "Null", "VC", "StdIO", "SpiceVMC":
			return nil
		case "Pty":
			if a.Pty.Path == "" {
				return nil
			}
		case "UNIX":
			if a.UNIX.Path == "" && a.UNIX.Mode == "" {
				return nil
			}
		case "NMDM":
			if a.NMDM.Master == "" || a.NMDM.Slave == "" {
				return nil
			}
		case "UDP":
			e.udpSource(name, pairs, "bind", a.UDP.BindHost, a.UDP.BindService)
			e.udpSource(name, pairs, "connect", a.UDP.ConnectHost, a.UDP.ConnectService)
			return nil
		}
		return e.valueAs(v.Field(u.idx[i]), name, false, true, pairs, true, u.caches[i])
	}, ok
}

// udpSource is one of domainChardevSourceUDPFlat's elements.
func (e *xmlEnc) udpSource(name string, pairs []string, mode, host, service string) {
	if host == "" && service == "" {
		return
	}
	e.open(name)
	e.pairs(pairs)
	e.attr("mode", mode)
	if host != "" {
		e.attr("host", host)
	}
	if service != "" {
		e.attr("service", service)
	}
	e.closeStart()
	e.end(name)
}

// hookInputSource mirrors DomainInputSource's MarshalXML: the member's fields, then the
// source's (&struct{Member; source}).
func hookInputSource() (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[libvirtxml.DomainInputSource]()
	u, ok := newUnion(t, []string{"Passthrough", "", "EVDev", ""})
	return t, func(e *xmlEnc, v reflect.Value, name string, pairs []string) error {
		i := u.first(v)
		if i < 0 {
			return nil
		}
		mv := v.Field(u.idx[i]).Elem()
		if !composable(mv.Type()) || !planOf(t).generic {
			return errNoHook
		}
		return e.element(name, pairs, true, mv, v)
	}, ok
}

// hookGraphic mirrors DomainGraphic's MarshalXML: typed by the member set, the member's
// fields and then the graphic's <audio>, the struct passed by value.
func hookGraphic() (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[libvirtxml.DomainGraphic]()
	u, ok := newUnion(t, []string{"SDL", "sdl", "VNC", "vnc", "RDP", "rdp", "Desktop", "desktop",
		"Spice", "spice", "EGLHeadless", "egl-headless", "DBus", "dbus"})
	audio, ok2 := fields(t, "Audio")
	return t, func(e *xmlEnc, v reflect.Value, _ string, pairs []string) error {
		i := u.first(v)
		if i < 0 {
			return nil
		}
		mv := v.Field(u.idx[i]).Elem()
		if !composable(mv.Type()) {
			return errNoHook
		}
		const name = "graphics"
		e.open(name)
		e.pairs(pairs)
		e.attr("type", u.vals[i])
		e.attrs(planOf(mv.Type()).attrs, mv)
		e.closeStart()
		if err := e.body(planOf(mv.Type()).body, mv, false); err != nil {
			return err
		}
		if err := e.valueAs(v.Field(audio[0]), "audio", false, false, nil, false, nil); err != nil {
			return err
		}
		e.end(name)
		return nil
	}, ok && ok2
}

// hookHostdev mirrors DomainHostdev's MarshalXML: mode and type from the member set, the
// member's fields before the hostdev's, the struct passed by value.
func hookHostdev() (reflect.Type, xmlHook, bool) {
	t := reflect.TypeFor[libvirtxml.DomainHostdev]()
	u, ok := newUnion(t, []string{"SubsysSCSI", "scsi", "SubsysSCSIHost", "scsi_host",
		"SubsysUSB", "usb", "SubsysPCI", "pci", "SubsysMDev", "mdev",
		"CapsStorage", "storage", "CapsMisc", "misc", "CapsNet", "net"})
	return t, func(e *xmlEnc, v reflect.Value, _ string, pairs []string) error {
		const name = "hostdev"
		i := u.first(v)
		if i < 0 {
			return e.alias(v, name, pairs)
		}
		mode := "subsystem"
		if i >= 5 {
			mode = "capabilities"
		}
		mv := v.Field(u.idx[i]).Elem()
		if !composable(mv.Type()) || !planOf(t).generic {
			return errNoHook
		}
		return e.element(name, with(with(pairs, "mode", mode), "type", u.vals[i]), false, mv, v)
	}, ok
}
