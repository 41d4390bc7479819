package host

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Scan reads the inventory of the host under root: every display-class function (class
// 0x03xxxx), every other member of their IOMMU groups, other functions of their slots that are
// companions (HDMI audio, USB, UCSI), SR-IOV VFs of GPUs, the groups of all of these with
// viability, and every mdev parent.
//
// Scan never stops at a bad file: a missing or unreadable attribute, or a device that vanishes
// while it runs, becomes an Inventory.Warnings entry naming the device and path. It returns an
// error only when the root itself cannot be read.
//
// Cost: one read of `uevent` (class, IDs, driver) per PCI function, and of its iommu_group
// link where that is cheaper than listing the groups met; full reads only for the selected
// ones; pci.ids names looked up only for the IDs present.
func Scan(root Root) (*Inventory, error) { return scan(root, groupsCheaper) }

// groupSource is how Scan learns the members of the IOMMU groups it meets.
type groupSource int

const (
	// groupsCheaper: from the links when that costs less than listing (groupsFromLinks).
	groupsCheaper groupSource = iota
	// groupsFromLinksAlways: from the functions' iommu_group links, whatever they cost.
	groupsFromLinksAlways
	// groupsListed: by listing ROOT/sys/kernel/iommu_groups/N/devices, whatever it costs.
	groupsListed
)

// scan is Scan learning the groups' members as from says (the tests run it every way).
func scan(root Root, from groupSource) (*Inventory, error) {
	if err := root.CheckTree(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	s := newScanner(root)
	s.groupsFrom = from
	s.pfOf = map[Address]Address{}
	inv := &Inventory{Root: root.Dir(), Devices: []Device{}, Groups: []Group{}, MdevParents: []MdevParent{}}
	groups, nonEmpty, err := s.root.listable(s.groups.dir)
	if err == nil {
		inv.IOMMU = nonEmpty
	} else if !errors.Is(err, fs.ErrNotExist) {
		s.warn("iommu groups: %v", err)
	}
	s.groups = groups
	defer groups.close()
	addrs, names, err := s.listFunctions()
	defer s.bus.close()
	if err != nil {
		return nil, err
	}
	s.readClasses(addrs, names)
	devs, groupMembers, batches := s.readSelected(addrs)
	if len(batches) == 1 {
		// One batch, read in address order: the devices are already where they belong
		// (on the 64-GPU host, 194 KB of fresh memory less than a copy).
		inv.Devices = batches[0]
	} else {
		// The devices in address order, each copied once into a slice of the right size
		// (an append per device doubled it, 0.65 MB of fresh memory on the 64-GPU host).
		sorted := make([]*Device, 0, len(devs))
		for _, d := range devs {
			sorted = append(sorted, d)
		}
		sort.Slice(sorted, func(i, j int) bool { return addrLess(sorted[i].Address, sorted[j].Address) })
		inv.Devices = make([]Device, len(sorted))
		for i, d := range sorted {
			inv.Devices[i] = *d
		}
	}
	inv.Groups = groupsOf(devs, groupMembers)
	addCompanions(inv)
	parents, err := s.mdevParents()
	if err != nil {
		s.warn("%v", err)
	}
	inv.MdevParents = parents
	s.addMdevGroups(inv)
	linkMdevParents(inv)
	for i := range inv.Devices {
		s.name(&inv.Devices[i])
	}
	sort.Strings(s.warnings)
	inv.Warnings = s.warnings
	return inv, nil
}

// listFunctions lists ROOT/sys/bus/pci/devices: the addresses and their directory names. A
// root that cannot be read at all is the only error; a host without PCI is a warning. The
// directory stays open as s.bus, which every function is then read relative to: one open for
// both, and the names listed with getdents alone (os.ReadDir made two objects per entry).
func (s *scanner) listFunctions() ([]Address, []string, error) {
	busDir := s.root.Sys("bus", "pci", "devices")
	var ents []string
	fd, err := s.root.open(busDir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err == nil {
		s.bus = s.root.dirAt(fd, busDir)
		s.bus.links = true
		ents, err = readNames(fd, busDir, -1)
		sort.Strings(ents)
	} else {
		s.bus = s.root.pathDir(busDir)
		err = &fs.PathError{Op: "open", Path: busDir, Err: err}
	}
	if err != nil {
		if _, serr := s.root.Stat(s.root.Dir()); serr != nil {
			return nil, nil, fmt.Errorf("scan host root %s: %w", s.root.Dir(), serr)
		}
		s.warn("no PCI devices: %v", err)
	}
	addrs := make([]Address, 0, len(ents))
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		a, err := ParseAddress(e)
		if err != nil {
			s.warn("%s: entry %q is not a PCI address", busDir, e)
			continue
		}
		addrs = append(addrs, a)
		names = append(names, e)
	}
	return addrs, names, nil
}

// firstRead is what Scan's first pass read of a function, for the second pass to use: the
// class and IDs (from uevent, else the class file) and, when hasGroup, its iommu_group link
// (the link's last element or the error reading it).
type firstRead struct {
	// name is the function's directory, when it is the address's canonical text (readDevice
	// opens it without formatting the address again).
	name     string
	id       identity
	hasGroup bool
	group    string
	groupErr error
}

// readClasses is pass 1: the class of every function, from its uevent (which also gives the
// IDs and the driver) or, when uevent lacks it, its class file, opened relative to the
// devices directory. Functions that vanished or whose class cannot be read are left out, with
// a warning. It also reads the iommu_group link of every function whose class may get it
// selected (a GPU's or a companion's: pass 2 needs it) and, when that costs less than listing
// their groups would (groupsFromLinks), of every other function too: the members of every
// group are then known without listing any (s.members; nil otherwise). It keeps what it read
// in s.first, the functions left out being those not in it.
func (s *scanner) readClasses(addrs []Address, names []string) {
	present := make([]bool, len(addrs))
	first := make([]firstRead, len(addrs))
	readGroup := func(i int) {
		f := &first[i]
		f.group, f.groupErr = s.bus.linkBaseRaw(names[i], "iommu_group")
		f.groupLinkRead(func() string { return s.bus.path(names[i] + "/iommu_group") })
	}
	forEachSplit(len(addrs), func(i int) {
		f := &first[i]
		var b [16]byte
		if string(addrs[i].appendText(b[:0])) == names[i] {
			f.name = names[i]
		}
		// ADDR/uevent, ADDR/class and ADDR/iommu_group relative to the devices directory: the
		// kernel follows the ADDR link once per file. Under a tree, where that link is resolved
		// from the root, the function's directory is opened once instead and its files read
		// beneath it (tree).
		d, n := s.bus, names[i]
		if s.bus.t != nil {
			d, n = s.bus.sub(names[i]), ""
			defer d.close()
		}
		un, us := fileOf(n, "uevent")
		if f.id = readIdentity(d, un, us); !f.id.hasClass {
			c, err := d.hex(joinRel(fileOf(n, "class")))
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					s.warn("%s: disappeared during the scan (%v)", addrs[i], err)
				} else {
					s.warn("%s: %v", addrs[i], err)
				}
				return
			}
			f.id = identity{class: c, hasClass: true}
		}
		present[i] = true
		if mayBeSelected(f.id.class) {
			f.group, f.groupErr = d.linkBaseRaw(fileOf(n, "iommu_group"))
			f.groupLinkRead(func() string { return d.path(joinRel(fileOf(n, "iommu_group"))) })
		}
	})
	var candidates, others []int
	for i := range addrs {
		switch {
		case first[i].hasGroup:
			candidates = append(candidates, i)
		case present[i]:
			others = append(others, i)
		}
	}
	s.members = nil
	if s.groupsFrom == groupsFromLinksAlways || s.groupsFrom == groupsCheaper && groupsFromLinks(len(others), len(candidates)) {
		forEach(len(others), func(j int) { readGroup(others[j]) })
		s.members = map[int][]Address{}
	}
	s.first = make(map[Address]*firstRead, len(addrs)) // pointers into first: a map of the reads themselves was 90 KB more on the 64-GPU host
	for i, a := range addrs {
		if !present[i] {
			continue
		}
		s.first[a] = &first[i]
		// The kernel links a function into its group's devices directory and the group
		// into the function's directory together (iommu_group_add_device), so the
		// functions whose link names group N are the PCI members ROOT/sys/kernel/
		// iommu_groups/N/devices lists.
		if s.members == nil || first[i].group == "" || first[i].groupErr != nil {
			continue
		}
		if id, err := strconv.Atoi(first[i].group); err == nil {
			s.members[id] = append(s.members[id], a)
		}
	}
}

// fileOf is the name and sub that read file of function n relative to the devices directory
// (n/file), or, n being "", relative to the function's own directory (file).
func fileOf(n, file string) (string, string) {
	if n == "" {
		return file, ""
	}
	return n, file
}

// groupLinkRead completes a read of the function's iommu_group link (linkBaseRaw's result in
// f.group and f.groupErr): a function without a group (no IOMMU) has no link, so no error to
// report, none built; any other error names the link, whose path is built only then.
func (f *firstRead) groupLinkRead(path func() string) {
	if errors.Is(f.groupErr, fs.ErrNotExist) {
		f.groupErr = nil
	} else if f.groupErr != nil {
		f.groupErr = wrapLinkErr(path(), f.groupErr)
	}
	f.hasGroup = true
}

// groupsFromLinks decides whether Scan learns the IOMMU groups' members from the iommu_group
// links of the others, the functions whose link pass 1 has not read (one readlink each),
// rather than by listing the group of each of the candidates (an open, two getdents and a
// close: on the 64-GPU host, 600 groups of one VF each). The tests run Scan both ways
// whatever it costs (scanner.groupsFrom).
func groupsFromLinks(others, candidates int) bool { return others <= 4*candidates }

// mayBeSelected reports whether a function of this class can be selected by its class alone:
// a GPU, or a companion of one.
func mayBeSelected(class uint32) bool {
	switch {
	case class>>16 == classDisplay:
		return true
	case class>>8 == classAudio, class>>8 == classUSB, class>>8 == classSerialBus:
		return true
	}
	return false
}

// readSelected is pass 2: the GPUs and the companions of their slots, then, transitively, the
// members of their IOMMU groups and the VFs of GPUs, each read in full once. It returns the
// devices read, the member addresses of every group met, and the devices of each batch, each
// batch read in address order (a PF before its VFs, whose routing IDs are above its own).
// The classes are pass 1's (s.first): a second map of them was 26 KB on the 64-GPU host, 56 KB on the 2,000-function one.
func (s *scanner) readSelected(addrs []Address) (map[Address]*Device, map[int][]Address, [][]Device) {
	selected := map[Address]bool{}
	var queue []Address
	add := func(a Address) {
		if !selected[a] {
			selected[a] = true
			queue = append(queue, a)
		}
	}
	gpuSlots := map[Address]bool{}
	for _, a := range addrs {
		if f, ok := s.first[a]; ok && f.id.class>>16 == classDisplay {
			add(a)
			gpuSlots[Address{Domain: a.Domain, Bus: a.Bus, Device: a.Device}] = true
		}
	}
	for _, a := range addrs {
		f, ok := s.first[a]
		if ok && gpuSlots[Address{Domain: a.Domain, Bus: a.Bus, Device: a.Device}] && companionClass(f.id.class) {
			add(a)
		}
	}
	devs := map[Address]*Device{}
	groupMembers := map[int][]Address{}
	var batches [][]Device
	for len(queue) > 0 {
		batch := queue
		queue = nil
		sort.Slice(batch, func(i, j int) bool { return addrLess(batch[i], batch[j]) })
		read := s.readBatch(batch)
		batches = append(batches, read)
		for i := range read {
			d := &read[i]
			devs[d.Address] = d
			if d.IOMMUGroup >= 0 {
				if _, seen := groupMembers[d.IOMMUGroup]; !seen {
					members := s.members[d.IOMMUGroup]
					if s.members == nil {
						members = s.groupAddresses(d.IOMMUGroup)
					}
					groupMembers[d.IOMMUGroup] = members
					for _, m := range members {
						add(m)
					}
				}
			}
			if d.IsGPU && d.SRIOV != nil {
				for _, vf := range d.SRIOV.VFs {
					add(vf)
				}
			}
		}
	}
	return devs, groupMembers, batches
}

// readBatch reads the devices of batch, in order, leaving out (with a warning) those that
// vanished or cannot be read. They are read into one slice, not one allocation each.
func (s *scanner) readBatch(batch []Address) []Device {
	read := make([]Device, len(batch))
	ok := make([]bool, len(batch))
	forEachSplit(len(batch), func(i int) {
		d, err := s.readDevice(batch[i])
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				s.warn("%s: disappeared during the scan: %v", batch[i], err)
			} else {
				s.warn("%v", err)
			}
			return
		}
		read[i], ok[i] = d, true
	})
	n := 0
	for i := range read {
		if ok[i] {
			read[n] = read[i]
			n++
		}
	}
	return read[:n]
}

// groupsOf builds the IOMMU groups from the devices already read (no second read of any
// member), with their viability, sorted by id.
func groupsOf(devs map[Address]*Device, groupMembers map[int][]Address) []Group {
	out := make([]Group, 0, len(groupMembers))
	for id, members := range groupMembers {
		g := Group{ID: id, Members: make([]GroupMember, 0, len(members))}
		for _, m := range members {
			d, ok := devs[m]
			if !ok {
				continue // vanished; already warned
			}
			g.Members = append(g.Members, GroupMember{Address: m, Class: d.Class, Driver: d.Driver, IsBridge: d.IsBridge, DriverOverride: d.DriverOverride, BootVGA: d.BootVGA})
		}
		sortMembers(g.Members)
		EvaluateGroup(&g)
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// addCompanions lists, on every GPU, the other functions of its slot or group that are audio,
// USB or UCSI.
func addCompanions(inv *Inventory) {
	var candidates []int // the functions that can be companions, in order: few next to the GPUs
	for i, o := range inv.Devices {
		if !o.IsGPU && isCompanionClass(o.Class) {
			candidates = append(candidates, i)
		}
	}
	for i := range inv.Devices {
		d := &inv.Devices[i]
		if !d.IsGPU {
			continue
		}
		for _, j := range candidates {
			o := inv.Devices[j]
			if o.Address.SameSlot(d.Address) || (d.IOMMUGroup >= 0 && o.IOMMUGroup == d.IOMMUGroup) {
				d.Companions = append(d.Companions, o.Address)
			}
		}
	}
}

// addMdevGroups adds the group of every mdev instance: the kernel makes one per instance,
// listed by UUID (GroupMdev), and it is the /dev/vfio/N a VM given that mdev opens.
func (s *scanner) addMdevGroups(inv *Inventory) {
	seen := map[int]bool{}
	for _, g := range inv.Groups {
		seen[g.ID] = true
	}
	for _, p := range inv.MdevParents {
		for _, t := range p.Types {
			for _, uuid := range t.Instances {
				link := s.root.Sys("bus", "mdev", "devices", uuid, "iommu_group")
				name, err := s.root.linkBase(link)
				if err != nil {
					if !errors.Is(err, fs.ErrNotExist) || inv.IOMMU {
						s.warn("mdev %s (%s/%s): %v", uuid, p.Parent, t.ID, err)
					}
					continue
				}
				id, err := strconv.Atoi(name)
				if err != nil {
					s.warn("mdev %s: %s names %q, not a group number", uuid, link, name)
					continue
				}
				if seen[id] {
					continue
				}
				seen[id] = true
				g, err := ReadGroup(s.root, id)
				if err != nil {
					s.warn("mdev %s: %v", uuid, err)
					continue
				}
				inv.Groups = append(inv.Groups, g)
			}
		}
	}
	sort.Slice(inv.Groups, func(i, j int) bool { return inv.Groups[i].ID < inv.Groups[j].ID })
}

// linkMdevParents points every PCI device that is an mdev parent at its MdevParents entry.
func linkMdevParents(inv *Inventory) {
	for i := range inv.MdevParents {
		p := &inv.MdevParents[i]
		if p.Address == nil {
			continue
		}
		for j := range inv.Devices {
			if inv.Devices[j].Address == *p.Address {
				inv.Devices[j].Mdev = p
			}
		}
	}
}

// groupAddresses lists the PCI functions of IOMMU group id.
func (s *scanner) groupAddresses(id int) []Address {
	names, err := s.groups.names(strconv.Itoa(id) + "/devices")
	if err != nil {
		s.warn("iommu group %d: %v", id, err)
		return nil
	}
	var out []Address
	for _, n := range names {
		if a, err := ParseAddress(n); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// forEachSplit runs f(0..n-1) on two goroutines when the batch is big enough to share (64 or
// more) and there are two Ps: chunks of 16, taken in order from one counter. f must be safe to
// call concurrently (readDevice is: the scanner's shared maps and warnings are under s.mu).
// Both passes use it, so that the two cores' syscalls overlap. Pass 2 (go test ./host -bench
// 'Scan$/gpu64', 2 cores): Scan took 45 ms instead of 56-67 ms at the same CPU time (68 ms).
// Pass 1, split too (#32, three runs each, same machine): the 64-GPU host's Scan 44.8 → 39.2 ms
// at 66.4 → 68.1 CPU-ms, the 2,000-function host's 32.3 → 22.1 ms at 35.6 → 38.2 CPU-ms; its
// `inspect -o json`, alternated with lspci in five rounds, 62.5-74.0 → 58.6-68.5 ms. (A
// measurement of the split in an earlier session had found 35% more CPU and no shorter wall
// time; these three runs each way, side by side, did not.)
func forEachSplit(n int, f func(i int)) {
	if n < 64 || runtime.GOMAXPROCS(0) < 2 {
		forEach(n, f)
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	run := func() {
		for {
			i := int(next.Add(16)) - 16
			if i >= n {
				return
			}
			for j := i; j < min(i+16, n); j++ {
				f(j)
			}
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); run() }()
	run()
	wg.Wait()
}

// forEach runs f(0..n-1) in order: what forEachSplit does below its split size, and the
// group-link reads of the functions pass 1 did not select (few, and each cheap).
func forEach(n int, f func(i int)) {
	for i := 0; i < n; i++ {
		f(i)
	}
}
