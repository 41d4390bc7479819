package host

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"
)

// Health check names, as they appear in a Problem's Check, the quarantine records and the
// JSON output. docs/health.md explains each.
const (
	HealthGone          = "gone"            // the function is no longer on the PCI bus
	HealthConfigRead    = "config-read"     // config space cannot be read
	HealthConfigOnes    = "config-all-ones" // config space reads 0xffff: the device fell off the bus
	HealthIdentity      = "config-identity" // vendor/device differ from what the kernel enumerated
	HealthHeaderType    = "header-type"     // header type is not 0, 1 or 2
	HealthCapList       = "capability-list" // the capability list is broken (pointer out of range, loop)
	HealthBAR           = "bar"             // a BAR differs from what it was when vgpu-host took the device
	HealthDriver        = "driver"          // the expected driver is not bound
	HealthAERNonFatal   = "aer-nonfatal"    // uncorrectable non-fatal AER errors rose since the last check
	HealthAERFatal      = "aer-fatal"       // fatal AER errors rose since the last check
	HealthAERCorrected  = "aer-correctable" // corrected AER errors rose (a warning only)
	HealthLinkDegraded  = "link-degraded"   // the link trained narrower than its maximum or baseline
	HealthLinkSlow      = "link-speed"      // the link runs slower than its maximum (a warning: ASPM/idle downtraining)
	HealthResetFailed   = "reset-failed"    // every reset tried failed or timed out
	HealthNoResetMethod = "no-reset-method" // the device offers no reset the policy allows (a warning)
	HealthStateDamaged  = "health-state"    // the health state file could not be read (a warning)
)

// Problem is one thing a health check found, with the evidence in words.
type Problem struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

func (p Problem) String() string { return p.Check + ": " + p.Detail }

// AERCounts are the TOTAL_ERR_* lines of a function's aer_dev_* files.
type AERCounts struct {
	Correctable uint64 `json:"correctable"`
	NonFatal    uint64 `json:"nonfatal"`
	Fatal       uint64 `json:"fatal"`
}

// LinkState is a PCIe function's negotiated and maximum link, as sysfs prints them
// ("16.0 GT/s PCIe", "16"). Empty on a function without a PCIe link (integrated, VFs).
type LinkState struct {
	Speed    string `json:"speed,omitempty"`
	MaxSpeed string `json:"max_speed,omitempty"`
	Width    int    `json:"width,omitempty"`
	MaxWidth int    `json:"max_width,omitempty"`
}

// HealthBaseline is what a function looked like when vgpu-host took it (bind) or last found
// it healthy: later checks compare against it.
type HealthBaseline struct {
	BARs       []BAR     `json:"bars,omitempty"`
	AER        AERCounts `json:"aer"`
	Link       LinkState `json:"link"`
	RecordedAt time.Time `json:"recorded_at"`
}

// DeviceHealth is the result of one check of one function.
type DeviceHealth struct {
	Address Address `json:"address"`
	// Healthy is false when any Problem was found; Warnings never make a function unhealthy.
	Healthy  bool      `json:"healthy"`
	Problems []Problem `json:"problems,omitempty"`
	Warnings []Problem `json:"warnings,omitempty"`
	Driver   string    `json:"driver,omitempty"`
	// ExpectDriver is the driver the check wanted bound ("" when any would do).
	ExpectDriver string     `json:"expect_driver,omitempty"`
	AER          *AERCounts `json:"aer,omitempty"`
	Link         LinkState  `json:"link"`
	BARs         []BAR      `json:"bars,omitempty"`
	// ResetMethods is the function's reset_method as read ("" when it has none).
	ResetMethods []string  `json:"reset_methods,omitempty"`
	CheckedAt    time.Time `json:"checked_at"`
}

func (h *DeviceHealth) fail(check, format string, a ...any) {
	h.Problems = append(h.Problems, Problem{Check: check, Detail: fmt.Sprintf(format, a...)})
	h.Healthy = false
}

func (h *DeviceHealth) warn(check, format string, a ...any) {
	h.Warnings = append(h.Warnings, Problem{Check: check, Detail: fmt.Sprintf(format, a...)})
}

// Reason is the problems in one line ("healthy" when there are none).
func (h DeviceHealth) Reason() string {
	if len(h.Problems) == 0 {
		return "healthy"
	}
	var s []string
	for _, p := range h.Problems {
		s = append(s, p.String())
	}
	return strings.Join(s, "; ")
}

// CheckOptions say what a check expects of the function.
type CheckOptions struct {
	// Driver is the driver that should be bound: the one a handback restored, vfio-pci for a
	// function on loan. "" accepts any driver, or none. "-" means none.
	Driver string
	// Baseline is what the function looked like before; nil reads the health state file's.
	Baseline *HealthBaseline
	// Now is the check's time (tests); zero means time.Now.
	Now time.Time
	// Xids are the fatal Xids reported for the GPU, and ResetAt the last successful reset:
	// with Baseline nil both come from the health state file (a later ResetAt given here wins).
	Xids    []XidEvent
	ResetAt time.Time
}

// PCI config space offsets (include/uapi/linux/pci_regs.h).
const (
	cfgVendor     = 0x00
	cfgDevice     = 0x02
	cfgStatus     = 0x06
	cfgHeaderType = 0x0e
	cfgBAR0       = 0x10
	cfgCapPtr     = 0x34
	cfgStatusCap  = 0x10 // PCI_STATUS_CAP_LIST
	cfgStdSize    = 0x40 // the standard header; a user without CAP_SYS_ADMIN reads only this
	cfgSize       = 0x100
)

// CheckDevice checks one function: it is still on the bus, its config space reads sane
// (identity, header type, BARs as assigned, capability list), the expected driver is bound,
// its AER counters have not risen since the baseline, and its link has not trained narrower.
// It reads sysfs only and changes nothing.
//
//	$ xxd -l 4 /sys/bus/pci/devices/0000:41:00.0/config
//	00000000: ffff ffff                                ....     <- the device fell off the bus
func CheckDevice(root Root, a Address, o CheckOptions) DeviceHealth {
	var st *HealthState
	var err error
	if o.Baseline == nil {
		st, err = LoadHealthState(root, a)
	}
	return checkDevice(root, a, o, st, err)
}

// checkDevice is CheckDevice with the function's health state file already read (st, nil when
// there is none, or stErr): a handback reads it once for the check and the record it then
// writes. With o.Baseline nil the baseline, pending Xids and last reset come from st.
func checkDevice(root Root, a Address, o CheckOptions, st *HealthState, stErr error) DeviceHealth {
	h := DeviceHealth{Address: a, Healthy: true, CheckedAt: o.Now, ExpectDriver: o.Driver}
	if h.CheckedAt.IsZero() {
		h.CheckedAt = time.Now().UTC()
	}
	base, xids, resetAt := o.Baseline, o.Xids, o.ResetAt
	if base == nil {
		if stErr != nil {
			h.warn(HealthStateDamaged, "%v", stErr)
		} else if st != nil {
			base, xids = st.Baseline, st.XidPending
			if st.LastReset.After(resetAt) {
				resetAt = st.LastReset
			}
		}
	}
	h.checkXid(root, xids, resetAt)
	dir := root.PCIDevice(a)
	if _, err := root.Stat(root.PCIDevice(a, "vendor")); err != nil {
		h.fail(HealthGone, "%s is not on the PCI bus (%s missing): the function was removed or fell off; a rescan (echo 1 > /sys/bus/pci/rescan) may bring it back", a, HostPath(root, dir))
		return h
	}
	h.checkConfig(root, a, base)
	h.checkDriver(root, a, o.Driver)
	h.checkAER(root, a, base)
	h.checkLink(root, a, base)
	if rm, err := root.readString(root.PCIDevice(a, "reset_method")); err == nil {
		h.ResetMethods = strings.Fields(rm)
	}
	return h
}

// checkConfig reads config space and judges the header, the BARs and the capability list.
func (h *DeviceHealth) checkConfig(root Root, a Address, base *HealthBaseline) {
	path := root.PCIDevice(a, "config")
	cfg, err := readConfig(root, path)
	if err != nil {
		h.fail(HealthConfigRead, "read config space %s: %v", HostPath(root, path), err)
		return
	}
	if len(cfg) < cfgStdSize {
		h.fail(HealthConfigRead, "config space %s is %d bytes, short of the %d-byte header", HostPath(root, path), len(cfg), cfgStdSize)
		return
	}
	vendor := binary.LittleEndian.Uint16(cfg[cfgVendor:])
	device := binary.LittleEndian.Uint16(cfg[cfgDevice:])
	// An SR-IOV VF's Vendor and Device ID registers read 0xffff by the PCIe spec (the kernel
	// takes them from the PF) and its BAR registers read 0 (the PF's SR-IOV capability holds
	// them), as the lab's capture shows:
	//
	//	$ xxd -l 16 /sys/bus/pci/devices/0000:00:0a.1/config      (a QEMU nvme VF)
	//	00000000: ffff ffff 0000 1000 0202 0801 0000 0000
	//
	// so a VF is dead only when the rest of its header reads all ones too.
	vf := root.Exists(root.PCIDevice(a, "physfn"))
	switch {
	case vf && binary.LittleEndian.Uint32(cfg[0x04:]) == 0xffffffff && binary.LittleEndian.Uint32(cfg[0x08:]) == 0xffffffff,
		!vf && (vendor == 0xffff || device == 0xffff):
		h.fail(HealthConfigOnes, "config space reads all ones (vendor 0x%04x, device 0x%04x): the function does not answer config cycles (fell off the bus, or is stuck in reset or D3cold)", vendor, device)
		return
	}
	if !vf {
		if v, err := root.readHex(root.PCIDevice(a, "vendor")); err == nil && uint32(vendor) != v {
			h.fail(HealthIdentity, "config space vendor 0x%04x is not the enumerated 0x%04x", vendor, v)
		}
		if d, err := root.readHex(root.PCIDevice(a, "device")); err == nil && uint32(device) != d {
			h.fail(HealthIdentity, "config space device 0x%04x is not the enumerated 0x%04x", device, d)
		}
	}
	ht := cfg[cfgHeaderType] & 0x7f
	if ht > 2 {
		h.fail(HealthHeaderType, "header type %d is none of 0 (endpoint), 1 (bridge), 2 (CardBus)", ht)
		return
	}
	h.checkBARs(root, a, cfg, ht == 0 && !vf, base)
	h.checkCaps(cfg)
}

// readConfig reads up to the first 256 bytes of config space (the standard header and the
// capability list; extended space is not needed).
func readConfig(root Root, path string) ([]byte, error) {
	return root.ReadHostFile(path, cfgSize)
}

// checkBARs compares the kernel's resources with the baseline (a BAR that changed size) and,
// when registers is set (an endpoint that is no VF), with config space (a BAR register that
// lost its address, as after a reset that did not restore state).
func (h *DeviceHealth) checkBARs(root Root, a Address, cfg []byte, registers bool, base *HealthBaseline) {
	bars, err := ReadBARs(root, root.PCIDevice(a, "resource"))
	if err != nil {
		h.fail(HealthBAR, "%v", err)
		return
	}
	h.BARs = bars
	if base != nil && base.BARs != nil {
		now := map[int]BAR{}
		for _, b := range bars {
			now[b.Index] = b
		}
		for _, b := range base.BARs {
			c, ok := now[b.Index]
			switch {
			case !ok:
				h.fail(HealthBAR, "BAR%d (%s) is gone", b.Index, sizeString(b.Size))
			case c.Size != b.Size:
				h.fail(HealthBAR, "BAR%d is %s, was %s when vgpu-host took the device", b.Index, sizeString(c.Size), sizeString(b.Size))
			}
			delete(now, b.Index)
		}
		for _, c := range now {
			h.fail(HealthBAR, "BAR%d (%s) is new since vgpu-host took the device", c.Index, sizeString(c.Size))
		}
	}
	if !registers {
		return // bridges have two BARs and windows; a VF's are in its PF's SR-IOV capability
	}
	for _, b := range bars {
		off := cfgBAR0 + 4*b.Index
		if b.IO || off+4 > len(cfg) {
			continue
		}
		reg := uint64(binary.LittleEndian.Uint32(cfg[off:])) &^ 0xf
		want := b.Start & 0xfffffff0
		if b.Is64 && off+8 <= len(cfg) {
			reg |= uint64(binary.LittleEndian.Uint32(cfg[off+4:])) << 32
			want = b.Start &^ 0xf
		}
		if b.Start != 0 && reg != want {
			h.fail(HealthBAR, "BAR%d register reads 0x%x, the kernel assigned 0x%x: the device lost its configuration", b.Index, reg, want)
		}
	}
}

// checkCaps walks the capability list: every pointer dword-aligned inside config space,
// past the header, and no loop.
func (h *DeviceHealth) checkCaps(cfg []byte) {
	if binary.LittleEndian.Uint16(cfg[cfgStatus:])&cfgStatusCap == 0 {
		return
	}
	ptr := int(cfg[cfgCapPtr])
	for seen := 0; ptr != 0; seen++ {
		if seen >= 48 {
			h.fail(HealthCapList, "capability list loops (more than 48 entries)")
			return
		}
		if ptr < cfgStdSize || ptr&3 != 0 || ptr >= cfgSize {
			h.fail(HealthCapList, "capability pointer 0x%02x is outside 0x40-0xfc or not dword aligned", ptr)
			return
		}
		if ptr+2 > len(cfg) {
			return // not readable without CAP_SYS_ADMIN: nothing to judge
		}
		if cfg[ptr] == 0xff {
			h.fail(HealthCapList, "capability at 0x%02x has ID 0xff", ptr)
			return
		}
		ptr = int(cfg[ptr+1]) &^ 3
	}
}

// checkDriver compares the bound driver with the expected one.
func (h *DeviceHealth) checkDriver(root Root, a Address, want string) {
	d, err := Driver(root, a)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.fail(HealthDriver, "%v", err)
		return
	}
	h.Driver = d
	switch {
	case want == "":
	case want == "-" && d != "":
		h.fail(HealthDriver, "bound to %s, expected no driver", d)
	case want != "-" && d != want:
		h.fail(HealthDriver, "bound to %s, expected %s", orNoDriver(d), want)
	}
}

func orNoDriver(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}

// checkAER reads the AER counters and compares them with the baseline's.
//
//	$ cat /sys/bus/pci/devices/0000:41:00.0/aer_dev_fatal
//	Undefined 0
//	...
//	TOTAL_ERR_FATAL 0
func (h *DeviceHealth) checkAER(root Root, a Address, base *HealthBaseline) {
	c, ok, err := ReadAER(root, a)
	if err != nil {
		h.warn(HealthAERCorrected, "%v", err)
		return
	}
	if !ok {
		return // no AER capability, or a kernel without CONFIG_PCIEAER
	}
	h.AER = &c
	if base == nil {
		return
	}
	if c.Fatal > base.AER.Fatal {
		h.fail(HealthAERFatal, "TOTAL_ERR_FATAL rose from %d to %d", base.AER.Fatal, c.Fatal)
	}
	if c.NonFatal > base.AER.NonFatal {
		h.fail(HealthAERNonFatal, "TOTAL_ERR_NONFATAL rose from %d to %d", base.AER.NonFatal, c.NonFatal)
	}
	if c.Correctable > base.AER.Correctable {
		h.warn(HealthAERCorrected, "TOTAL_ERR_COR rose from %d to %d (corrected by the hardware)", base.AER.Correctable, c.Correctable)
	}
}

// ReadAER reads a function's AER totals. ok is false when it has no aer_dev_* files.
func ReadAER(root Root, a Address) (c AERCounts, ok bool, err error) {
	for _, f := range []struct {
		file, key string
		v         *uint64
	}{
		{"aer_dev_correctable", "TOTAL_ERR_COR", &c.Correctable},
		{"aer_dev_nonfatal", "TOTAL_ERR_NONFATAL", &c.NonFatal},
		{"aer_dev_fatal", "TOTAL_ERR_FATAL", &c.Fatal},
	} {
		p := root.PCIDevice(a, f.file)
		b, rerr := root.ReadHostFile(p, 0)
		if errors.Is(rerr, fs.ErrNotExist) {
			continue
		}
		if rerr != nil {
			return c, ok, fmt.Errorf("read %s: %w", p, rerr)
		}
		v, found, perr := aerTotal(b, f.key)
		if perr != nil || !found {
			return c, ok, fmt.Errorf("read %s: no %q line with a count", p, f.key)
		}
		*f.v, ok = v, true
	}
	return c, ok, nil
}

// aerTotal finds "KEY N" in an aer_dev_* file.
func aerTotal(b []byte, key string) (uint64, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil, err
		}
	}
	return 0, false, sc.Err()
}

// checkLink compares the negotiated link with the maximum and the baseline. A narrower width
// is a problem (a lane or connector fault, a device that retrained badly after a reset); a
// lower speed is a warning only, since GPUs downtrain their link when idle to save power.
func (h *DeviceHealth) checkLink(root Root, a Address, base *HealthBaseline) {
	h.Link = ReadLink(root, a)
	l := h.Link
	if l.Width > 0 && l.MaxWidth > 0 && l.Width < l.MaxWidth {
		h.fail(HealthLinkDegraded, "link width x%d, the device can do x%d", l.Width, l.MaxWidth)
	} else if base != nil && base.Link.Width > 0 && l.Width > 0 && l.Width < base.Link.Width {
		h.fail(HealthLinkDegraded, "link width x%d, was x%d when vgpu-host took the device", l.Width, base.Link.Width)
	}
	if s, m := linkGTs(l.Speed), linkGTs(l.MaxSpeed); s > 0 && m > 0 && s < m {
		h.warn(HealthLinkSlow, "link speed %s, the device can do %s (normal for an idle GPU)", l.Speed, l.MaxSpeed)
	}
}

// ReadLink reads current_link_speed/width and max_link_speed/width; missing files leave
// their fields empty.
func ReadLink(root Root, a Address) LinkState {
	var l LinkState
	l.Speed, _ = root.readString(root.PCIDevice(a, "current_link_speed"))
	l.MaxSpeed, _ = root.readString(root.PCIDevice(a, "max_link_speed"))
	if w, err := root.readInt(root.PCIDevice(a, "current_link_width")); err == nil {
		l.Width = int(w)
	}
	if w, err := root.readInt(root.PCIDevice(a, "max_link_width")); err == nil {
		l.MaxWidth = int(w)
	}
	return l
}

// linkGTs parses "16.0 GT/s PCIe" (or "8 GT/s") to GT/s; 0 for "Unknown" or garbage.
func linkGTs(s string) float64 {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "GT/s" {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return v
}

// sizeString renders a BAR size: "64 GiB", "16 MiB", "4 KiB".
func sizeString(n uint64) string {
	for _, u := range []struct {
		s string
		v uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return fmt.Sprintf("%d %s", n/u.v, u.s)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// OnBus reports whether a is on the PCI bus (its sysfs directory has a vendor attribute).
func OnBus(root Root, a Address) bool { return root.Exists(root.PCIDevice(a, "vendor")) }

// BaselineOf is what a function looks like now, to compare later checks with.
func BaselineOf(root Root, a Address, now time.Time) (HealthBaseline, error) {
	bars, err := ReadBARs(root, root.PCIDevice(a, "resource"))
	if err != nil {
		return HealthBaseline{}, err
	}
	aer, _, err := ReadAER(root, a)
	if err != nil {
		return HealthBaseline{}, err
	}
	if bars == nil {
		bars = []BAR{}
	}
	return HealthBaseline{BARs: bars, AER: aer, Link: ReadLink(root, a), RecordedAt: now.UTC()}, nil
}
