package ops

import (
	"context"
	"fmt"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// RenderRequest is `render SPEC.yaml`: the libvirt domain XML of a VM spec. It changes nothing.
type RenderRequest struct {
	// Spec is the VM spec: loaded by the CLI, or its content sent to the agent.
	Spec Spec `json:"spec"`
	// Offline renders without reading the host (--offline).
	Offline bool `json:"offline,omitempty"`
	// VirtType overrides spec.virtType: "", kvm or qemu (--virt-type).
	VirtType string `json:"virt_type,omitempty"`
}

// Op is "render".
func (RenderRequest) Op() string { return "render" }

// Bool is the request's boolean setting by its flag's name.
func (r RenderRequest) Bool(name string) bool { return name == "offline" && r.Offline }

// IsSet reports whether the request sets the named setting.
func (r RenderRequest) IsSet(name string) bool {
	return r.Bool(name) || name == "virt-type" && r.VirtType != ""
}

// RenderResult is render's answer: the domain XML and how the spec was resolved. Its JSON is
// the command's --output json.
type RenderResult struct {
	Name       string              `json:"name"`
	XML        string              `json:"xml"`
	Resolution *domains.Allocation `json:"resolution"`
}

// Notes are what a user should know about the choices made, one a line: every fallback with
// its reason, then the resolution's notes (render prints them on stderr, after no XML).
func (r *RenderResult) Notes() []string {
	var out []string
	for _, g := range r.Resolution.GPUs {
		if g.FellBack {
			out = append(out, fmt.Sprintf("spec.gpus[%d]: fell back to virtio-gpu: %s", g.Index, g.Reason))
		}
	}
	return append(out, r.Resolution.Notes...)
}

// Render is render: the spec resolved against the host's inventory (none when Offline:
// addresses and UUIDs as given, placeholder vGPU UUIDs) and built into its domain XML.
func Render(_ context.Context, env Env, req RenderRequest) (*RenderResult, error) {
	if err := CheckVirtType(req.VirtType); err != nil {
		return nil, err
	}
	vms, err := LoadSpecs("render", []Spec{req.Spec})
	if err != nil {
		return nil, err
	}
	vm := vms[0]
	var inv *host.Inventory
	if !req.Offline {
		if inv, err = host.Scan(env.Root); err != nil {
			return nil, fmt.Errorf("render %s: scan host (use --offline to render without one): %w", vm.Metadata.Name, err)
		}
	}
	alloc, err := domains.Resolve(vm, inv, domains.ResolveOptions{Offline: req.Offline, VirtType: req.VirtType})
	if err != nil {
		return nil, err
	}
	xml, err := domains.Render(vm, alloc, domains.BuildOptions{})
	if err != nil {
		return nil, err
	}
	return &RenderResult{Name: vm.Metadata.Name, XML: xml, Resolution: alloc}, nil
}
