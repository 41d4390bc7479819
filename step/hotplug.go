package step

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt"
)

// The hotplug actions (lifecycle/hotplug.go takes them; docs/hotplug.md).
const (
	// ActHotplug opens one attach in the journal: the steps after it, up to the attach-device
	// step of the same device, are that attach's. While it is "started" the attach has not
	// finished (a crash: the next attach or detach of the VM undoes the group). It changes
	// nothing itself; it names the device and the claims the attach took.
	ActHotplug Action = "hotplug"
	// ActAttachDevice attaches one device to a defined domain (live and/or config).
	ActAttachDevice Action = "attach-device"
)

// DetachTimeout bounds how long undoing an attach-device step waits for the guest to release
// the device (destroy, a failed attach), unless the Env has a DetachTimeout() method (detach
// --timeout).
const DetachTimeout = 30 * time.Second

// Hotplug is the journal's mark of one attach of Device to VM holding the ledger claims
// Claims names by key ("kind:id", vgpu.Claim.Key).
type Hotplug struct {
	VM, Device string
	Claims     []string
}

// Action implements Step.
func (Hotplug) Action() Action { return ActHotplug }

// Target is the device's name (what detach takes).
func (s Hotplug) Target() string { return s.Device }

// Params records the VM and the claims, as "kind:id" joined by commas.
func (s Hotplug) Params() map[string]string {
	return map[string]string{"vm": s.VM, "claims": strings.Join(s.Claims, ",")}
}

// Text implements Step.
func (s Hotplug) Text() string { return fmt.Sprintf("hotplug %s into domain %s", s.Device, s.VM) }

// Do changes nothing: the claims are taken in the ledger with the record.
func (Hotplug) Do(context.Context, Env) error { return nil }

// Undo changes nothing: lifecycle releases the claims when it marks the step undone.
func (Hotplug) Undo(context.Context, Env) error { return nil }

// AttachDevice attaches the device XML to domain VM in Scope; Before is how many devices of
// its key (virt.DeviceKey) the persistent definition had before, so an undo of a video
// device (which has no identity of its own) removes only one that this step added.
type AttachDevice struct {
	VM, Device, XML string
	Scope           virt.DeviceScope
	Before          int
}

// Action implements Step.
func (AttachDevice) Action() Action { return ActAttachDevice }

// Target is the device's name.
func (s AttachDevice) Target() string { return s.Device }

// Params records the domain, the device XML, the scope and Before.
func (s AttachDevice) Params() map[string]string {
	return map[string]string{"vm": s.VM, "xml": s.XML, "scope": strconv.Itoa(int(s.Scope)), "before": strconv.Itoa(s.Before)}
}

// Text implements Step.
func (s AttachDevice) Text() string {
	return fmt.Sprintf("attach %s to domain %s (%s)", s.Device, s.VM, s.Scope)
}

// Do implements Step.
func (s AttachDevice) Do(ctx context.Context, env Env) error {
	if s.Scope == virt.DeviceConfig && s.isVideo() {
		// libvirt attaches no <video>, not even to the definition: redefine it.
		return virt.EditDefinition(ctx, env.Conn(), s.VM, s.XML, true)
	}
	return env.Conn().AttachDevice(ctx, s.VM, s.XML, s.Scope)
}

func (s AttachDevice) isVideo() bool { return strings.HasPrefix(strings.TrimSpace(s.XML), "<video") }

// Undo detaches the device from wherever it still is: from the running guest (waiting up to
// DetachTimeout for the guest to release it) and from the persistent definition. A device
// that is gone already, or a domain that is, is not an error.
func (s AttachDevice) Undo(ctx context.Context, env Env) error {
	c := env.Conn()
	key, err := virt.DeviceKey(s.XML)
	if err != nil {
		return err
	}
	st, err := c.State(ctx, s.VM)
	if err != nil {
		return err // IsNotFound: nothing to undo (the caller tolerates it)
	}
	var scope virt.DeviceScope
	live := 0
	if st == virt.StateRunning || st == virt.StatePaused {
		x, err := c.LiveDomainXML(ctx, s.VM)
		if err != nil {
			return err
		}
		if live, err = virt.CountDevice(x, key); err != nil {
			return err
		}
		// A live video is never hotplugged (libvirt refuses), so a live count says nothing.
		if live > 0 && s.Scope&virt.DeviceLive != 0 && !strings.HasPrefix(key, "video:") {
			scope |= virt.DeviceLive
		}
	}
	if s.Scope&virt.DeviceConfig != 0 {
		x, err := c.DomainXML(ctx, s.VM)
		if err != nil {
			return err
		}
		n, err := virt.CountDevice(x, key)
		if err != nil {
			return err
		}
		if n > s.Before {
			scope |= virt.DeviceConfig
		}
	}
	if scope&virt.DeviceLive != 0 {
		// The running guest first, and the definition only once the guest has let go: a guest
		// that keeps the device keeps it in the definition too, so a detach that times out
		// changed nothing (libvirt, asked for both at once, drops it from the definition at
		// once and leaves the live unplug pending). The timeout counts from the request:
		// libvirt 9.0 itself waits up to 5 s for the guest before it answers.
		timeout := DetachTimeout
		if t, ok := env.(interface{ DetachTimeout() time.Duration }); ok {
			timeout = t.DetachTimeout()
		}
		start := time.Now()
		if err := c.DetachDevice(ctx, s.VM, s.XML, virt.DeviceLive); err != nil {
			return err
		}
		if err := virt.WaitDeviceGoneSince(ctx, c, s.VM, key, live, start, timeout); err != nil {
			return err
		}
	}
	switch {
	case scope&virt.DeviceConfig == 0:
		return nil
	case s.isVideo():
		return virt.EditDefinition(ctx, c, s.VM, s.XML, false)
	}
	return c.DetachDevice(ctx, s.VM, s.XML, virt.DeviceConfig)
}

// decodeHotplug is Decode for the hotplug actions.
func decodeHotplug(f *fields) (Step, error) {
	vm := f.str("vm")
	if f.err == nil {
		if err := host.CheckComponent("vm", vm); err != nil {
			return nil, fmt.Errorf("journal step %s %s: %w", f.action, f.target, err)
		}
	}
	if f.target == "" {
		return nil, f.bad("target", "want the device's name")
	}
	if Action(f.action) == ActHotplug {
		var claims []string
		if s := f.params["claims"]; s != "" {
			for _, k := range strings.Split(s, ",") {
				kind, id, ok := strings.Cut(k, ":")
				if !ok || kind == "" || id == "" {
					return nil, f.bad("claims", "want kind:id joined by commas")
				}
				claims = append(claims, k)
			}
		}
		return f.step(Hotplug{VM: vm, Device: f.target, Claims: claims})
	}
	s := AttachDevice{VM: vm, Device: f.target, XML: f.str("xml"), Scope: virt.DeviceScope(f.int("scope", true)), Before: f.int("before", false)}
	if f.err == nil {
		if _, err := virt.DeviceKey(s.XML); err != nil {
			return nil, f.bad("xml", "want one <hostdev> or <video> element")
		}
		if s.Scope == 0 || s.Scope&^(virt.DeviceLive|virt.DeviceConfig) != 0 {
			return nil, f.bad("scope", "want 1 (live), 2 (config) or 3")
		}
	}
	return f.step(s)
}
