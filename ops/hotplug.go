package ops

import (
	"context"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/lifecycle"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// AttachRequest is `attach VM`: one more device for a VM apply made, running or stopped.
type AttachRequest struct {
	// VM is the VM's name.
	VM string `json:"vm"`
	// GPU is a GPU's PCI address to pass through with its companions (--gpu); Profile a vGPU
	// type to create an instance of (--profile); Virtio a virtio-gpu (--virtio): exactly one.
	GPU     string `json:"gpu,omitempty"`
	Profile string `json:"profile,omitempty"`
	Virtio  bool   `json:"virtio,omitempty"`
	// Config changes the VM's definition only, even when it runs (--config).
	Config bool `json:"config,omitempty"`
	// DryRun resolves and checks everything and changes nothing (--dry-run).
	DryRun bool `json:"dry_run,omitempty"`
	// Force are the safety checks to go past, each by name (vfio.ForceableChecks).
	Force []string `json:"force,omitempty"`
}

// Op is "attach".
func (AttachRequest) Op() string { return "attach" }

// Bool is the request's boolean setting by its flag's name.
func (r AttachRequest) Bool(name string) bool {
	switch name {
	case "virtio":
		return r.Virtio
	case "config":
		return r.Config
	case "dry-run":
		return r.DryRun
	}
	return false
}

// IsSet reports whether the request sets the named setting.
func (r AttachRequest) IsSet(name string) bool {
	switch name {
	case "gpu":
		return r.GPU != ""
	case "profile":
		return r.Profile != ""
	case "force":
		return len(r.Force) > 0
	}
	return r.Bool(name)
}

// Check refuses a request that does not name a VM or exactly one device (exit 2).
func (r AttachRequest) Check() error {
	if err := host.CheckComponent("VM name", r.VM); err != nil {
		return err
	}
	n := 0
	for _, set := range []bool{r.GPU != "", r.Profile != "", r.Virtio} {
		if set {
			n++
		}
	}
	if n != 1 {
		return Usagef("attach %s: give exactly one of --gpu ADDR, --profile NAME and --virtio", r.VM)
	}
	return nil
}

// HotplugResult is what attach or detach did (or with a dry run would do): its JSON is the
// command's --output json.
type HotplugResult = lifecycle.HotplugResult

// Attach is attach: the device resolved, checked (apply's safety checks, Force going past the
// named ones), claimed, the host prepared and the device given to the guest and its
// definition, each step journalled; with DryRun, the steps and the device XML only.
func Attach(ctx context.Context, env Env, req AttachRequest) (*HotplugResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	force, err := CheckForce(req.Force, vfio.ForceableChecks)
	if err != nil {
		return nil, err
	}
	lc, done, err := env.lifecycle("attach", lifecycle.Options{Force: force})
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := lc.Attach(ctx, lifecycle.AttachRequest{VM: req.VM, GPU: req.GPU, Profile: req.Profile, Virtio: req.Virtio,
		Config: req.Config, DryRun: req.DryRun})
	if err != nil {
		return nil, err // a failed attach prints nothing on stdout
	}
	return res, nil
}

// DetachRequest is `detach VM DEVICE`: a device attach gave a VM taken back and released.
type DetachRequest struct {
	// VM is the VM's name.
	VM string `json:"vm"`
	// Device is what attach printed: a GPU's PCI address, an instance's UUID or "virtio-gpu".
	Device string `json:"device"`
	// Timeout bounds the wait for the guest to release the device; it must be positive.
	Timeout time.Duration `json:"timeout"`
}

// DefaultDetachTimeout is detach's wait for the guest when the caller names none.
const DefaultDetachTimeout = 30 * time.Second

// Op is "detach".
func (DetachRequest) Op() string { return "detach" }

// Bool is false: detach has no boolean setting.
func (DetachRequest) Bool(string) bool { return false }

// IsSet reports whether the request sets the named setting.
func (r DetachRequest) IsSet(name string) bool {
	return name == "timeout" && r.Timeout != DefaultDetachTimeout
}

// Check refuses a malformed VM name or a timeout that is not positive (exit 2).
func (r DetachRequest) Check() error {
	if err := host.CheckComponent("VM name", r.VM); err != nil {
		return err
	}
	if r.Timeout <= 0 {
		return Usagef("--timeout %s: want a positive duration", r.Timeout)
	}
	return nil
}

// Detach is detach: libvirt takes the device from the guest (which must let it go within
// Timeout) and the definition, its attach's host steps are undone and its claims released,
// and the functions it gave back are checked (HandBack).
func Detach(ctx context.Context, env Env, req DetachRequest) (*HotplugResult, error) {
	if err := req.Check(); err != nil {
		return nil, err
	}
	lc, done, err := env.lifecycle("detach", lifecycle.Options{})
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := lc.Detach(ctx, req.VM, req.Device, req.Timeout)
	if err != nil {
		return nil, err
	}
	if res.Changed {
		w, _ := env.HostIO()
		HandBack(ctx, env, w, ReleasedBy(&lifecycle.DestroyResult{Released: res.Claims}), "detach "+req.VM+" "+res.Device, false)
	}
	return res, nil
}
