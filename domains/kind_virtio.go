package domains

import (
	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// virtioKind is a paravirtual virtio-gpu (virtio-vga-gl with virgl), asked for or fallen back
// to when no GPU or vGPU is free. It takes nothing from the host.
type virtioKind struct{}

func (virtioKind) Name() vgpu.Kind { return vgpu.VirtioGPU }

func (virtioKind) wants(g GPU) bool { return g.VirtioGPU != nil }

func (virtioKind) resolve(*resolver, int, GPU) (GPUAllocation, error) {
	return GPUAllocation{Kind: vgpu.VirtioGPU}, nil
}

func (virtioKind) render(_ *Builder, g GPU, _ GPUAllocation, _ *libvirtxml.Domain, v *video) error {
	if g.VirtioGPU != nil {
		v.virtio = g.VirtioGPU
	} else if v.virtio == nil {
		v.virtio = &VirtioGPU{} // fallback: 2D, runs on any host
	}
	return nil
}

func (virtioKind) claims(GPUAllocation) []vgpu.Claim { return nil }

func (virtioKind) hostSteps(GPUAllocation, *Numbering) ([]step.Step, []string, error) {
	return nil, nil, nil
}
