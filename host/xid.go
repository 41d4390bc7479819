package host

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// HealthXid is the check of a GPU that reported a fatal NVIDIA Xid error (NVML's
// nvmlEventSetWait, relayed by the agent) and has not been reset, nor the host rebooted,
// since: the GPU needs a reset before it can be trusted with a guest again.
const HealthXid = "nvidia-xid"

// HealthXidInfo is the warning of an informational Xid (an application fault, a contained
// ECC error): counted and shown, never unhealthy.
const HealthXidInfo = "nvidia-xid-info"

// XidEvent is one NVIDIA Xid error NVML reported for a GPU (nvmlEventSetWait with
// nvmlEventTypeXidCriticalError). GPUInstance and ComputeInstance name the MIG instance the
// error belongs to; both are -1 for the whole GPU (NVML's 0xFFFFFFFF).
type XidEvent struct {
	// Address is the GPU's PCI function.
	Address Address `json:"address"`
	// Xid is the error's number (NVML's eventData).
	Xid             uint64    `json:"xid"`
	GPUInstance     int       `json:"gpu_instance"`
	ComputeInstance int       `json:"compute_instance"`
	Time            time.Time `json:"time"`
}

// xidFatal are the Xids after which vgpu-host holds the GPU unhealthy until it is reset or
// the host rebooted: those whose immediate action in NVIDIA's Xid catalogue
// (docs.nvidia.com/deploy/xid-errors, "Resolution Bucket") is a GPU reset or a node reboot.
// Every other Xid (13 and 43 application faults, 31 MMU faults, 45 preemptive cleanup, 63 a
// row remapping pending, 92 a high single-bit ECC rate, 94 a contained ECC error whose
// application was stopped) is informational: counted, and the GPU stays healthy.
var xidFatal = lazy.Value[map[uint64]string]{New: func() map[uint64]string {
	return map[uint64]string{
		46:  "GPU stopped processing",
		48:  "double-bit ECC error",
		62:  "internal micro-controller halt",
		64:  "ECC page retirement or row remapping failure",
		74:  "NVLink error",
		79:  "GPU has fallen off the bus",
		95:  "uncontained ECC error",
		119: "GSP RPC timeout",
		120: "GSP error",
		140: "unrecovered ECC error",
		154: "GPU recovery action changed (reset or reboot required)",
	}
}}

// XidFatal reports whether Xid x leaves the GPU unhealthy until a reset (docs/health.md).
func XidFatal(x uint64) bool { _, ok := xidFatal.Get()[x]; return ok }

// XidWhat names an Xid in words ("" for one vgpu-host has no words for).
func XidWhat(x uint64) string {
	if s, ok := xidFatal.Get()[x]; ok {
		return s
	}
	switch x {
	case 13:
		return "graphics engine exception"
	case 31:
		return "GPU memory page fault"
	case 43:
		return "GPU stopped processing (the application's channel)"
	case 45:
		return "preemptive cleanup"
	case 63:
		return "row remapping pending (reset to activate)"
	case 92:
		return "high single-bit ECC error rate"
	case 94:
		return "contained ECC error"
	}
	return ""
}

func (e XidEvent) String() string {
	s := fmt.Sprintf("Xid %d", e.Xid)
	if w := XidWhat(e.Xid); w != "" {
		s += " (" + w + ")"
	}
	if e.GPUInstance >= 0 {
		s += fmt.Sprintf(" in MIG GPU instance %d", e.GPUInstance)
	}
	return s + " at " + e.Time.UTC().Format(time.RFC3339)
}

// maxXidPending bounds the fatal Xids a health file keeps (the newest).
const maxXidPending = 16

// RecordXid adds an Xid event to its GPU's health file: the count by Xid
// (vgpuhost_nvidia_xid_total) and, for a fatal Xid, the event itself, which fails the GPU's
// checks until it is reset or the host rebooted. The GPU needs no baseline: NVML reports
// Xids of GPUs vgpu-host never bound.
func RecordXid(root Root, e XidEvent) error {
	st, err := LoadHealthState(root, e.Address)
	if err != nil {
		return fmt.Errorf("record %s of %s: %w", e, e.Address, err)
	}
	if st == nil {
		st = &HealthState{Address: e.Address}
	}
	if st.Xid == nil {
		st.Xid = map[string]uint64{}
	}
	st.Xid[strconv.FormatUint(e.Xid, 10)]++
	if XidFatal(e.Xid) {
		st.XidPending = append(st.XidPending, e)
		if n := len(st.XidPending); n > maxXidPending {
			st.XidPending = slices.Clone(st.XidPending[n-maxXidPending:])
		}
	}
	if err := SaveHealthState(root, st); err != nil {
		return fmt.Errorf("record %s of %s: %w", e, e.Address, err)
	}
	return nil
}

// checkXid fails the check for every fatal Xid not cleared since: a reset after it (since,
// the last successful reset vgpu-host made) or a host boot after it.
func (h *DeviceHealth) checkXid(root Root, pending []XidEvent, since time.Time) {
	if len(pending) == 0 {
		return
	}
	boot, _ := BootTime(root)
	for _, e := range pending {
		if !e.Time.After(since) || (!boot.IsZero() && e.Time.Before(boot)) {
			continue
		}
		h.fail(HealthXid, "NVIDIA %s: the GPU needs a reset (vgpu-host unbind --reset, or a reboot) before a guest gets it", e)
	}
}

// BootTime is when the host booted (/proc/stat's btime); zero when it cannot be read.
//
//	$ grep btime /proc/stat
//	btime 1764129600
func BootTime(root Root) (time.Time, error) {
	b, err := root.ReadFileLimit(root.Proc("stat"), 1<<20)
	if err != nil {
		return time.Time{}, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("read %s: btime %s: %w", root.Proc("stat"), quoted(v), err)
			}
			return time.Unix(n, 0).UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("read %s: no btime line", root.Proc("stat"))
}
