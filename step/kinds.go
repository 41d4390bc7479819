package step

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/virt"
)

// BindGroup binds the whole IOMMU group of Functions[0] (the GPU and its companions) to
// vfio-pci; its undo gives every function back the driver it had.
type BindGroup struct {
	Functions []host.Address
}

// Action implements Step.
func (BindGroup) Action() Action { return ActBindGroup }

// Target is the GPU's address.
func (s BindGroup) Target() string { return s.Functions[0].String() }

// Params records the functions.
func (s BindGroup) Params() map[string]string {
	return map[string]string{"functions": JoinAddrs(s.Functions)}
}

// Text implements Step.
func (s BindGroup) Text() string {
	return fmt.Sprintf("bind the IOMMU group of %s to vfio-pci", s.Functions[0])
}

// Do implements Step.
func (s BindGroup) Do(ctx context.Context, env Env) error {
	h, err := env.Host(s.Text())
	if err != nil {
		return err
	}
	return h.BindGroup(ctx, env.VM(), s.Functions, env.Forced())
}

// Undo implements Step.
func (s BindGroup) Undo(ctx context.Context, env Env) error {
	h, err := env.Host("restore drivers of " + s.Target())
	if err != nil {
		return err
	}
	return h.RestoreGroup(ctx, env.VM(), s.Functions)
}

// CreateMdev creates the VM's mdev instance number Index (UUID) of Type on Parent.
type CreateMdev struct {
	UUID, Parent, Type string
	Index              int
}

// Action implements Step.
func (CreateMdev) Action() Action { return ActCreateMdev }

// Target is the instance's UUID.
func (s CreateMdev) Target() string { return s.UUID }

// Params records parent, type and index.
func (s CreateMdev) Params() map[string]string {
	return map[string]string{"parent": s.Parent, "type": s.Type, "index": strconv.Itoa(s.Index)}
}

// Text implements Step.
func (s CreateMdev) Text() string {
	return fmt.Sprintf("create mdev %s of type %s on %s", s.UUID, s.Type, s.Parent)
}

// Do implements Step.
func (s CreateMdev) Do(ctx context.Context, env Env) error {
	h, err := env.Host(s.Text())
	if err != nil {
		return err
	}
	return h.CreateMdev(ctx, env.VM(), s.Parent, s.Type, s.UUID, s.Index)
}

// Undo implements Step.
func (s CreateMdev) Undo(ctx context.Context, env Env) error {
	h, err := env.Host("remove mdev " + s.UUID)
	if err != nil {
		return err
	}
	return h.RemoveMdev(ctx, env.VM(), s.UUID)
}

// AssignVGPU writes NVIDIA vendor vGPU type Type to VF's nvidia/current_vgpu_type, as the VM's
// vendor vGPU number Index.
type AssignVGPU struct {
	VF       host.Address
	Type     int
	TypeName string
	Index    int
}

// Action implements Step.
func (AssignVGPU) Action() Action { return ActAssignVGPU }

// Target is the VF's address.
func (s AssignVGPU) Target() string { return s.VF.String() }

// Params records type, name and index.
func (s AssignVGPU) Params() map[string]string {
	return map[string]string{"type": strconv.Itoa(s.Type), "type_name": s.TypeName, "index": strconv.Itoa(s.Index)}
}

// Text implements Step.
func (s AssignVGPU) Text() string {
	return fmt.Sprintf("assign vGPU type %d (%s) to VF %s", s.Type, s.TypeName, s.VF)
}

// Do implements Step.
func (s AssignVGPU) Do(ctx context.Context, env Env) error {
	h, err := env.Host(s.Text())
	if err != nil {
		return err
	}
	return h.AssignVGPU(ctx, env.VM(), s.VF, strconv.Itoa(s.Type), s.Index)
}

// Undo implements Step.
func (s AssignVGPU) Undo(ctx context.Context, env Env) error {
	h, err := env.Host("clear vGPU type of " + s.Target())
	if err != nil {
		return err
	}
	t := ""
	if s.Type != 0 {
		t = strconv.Itoa(s.Type)
	}
	return h.ClearVGPU(ctx, env.VM(), s.VF, t)
}

// EnsurePool makes sure the dir storage pool Pool at Path exists and runs. It is shared by
// every VM, so its undo does nothing.
type EnsurePool struct {
	Pool, Path string
}

// Action implements Step.
func (EnsurePool) Action() Action { return ActEnsurePool }

// Target is the pool's name.
func (s EnsurePool) Target() string { return s.Pool }

// Params records the pool's directory.
func (s EnsurePool) Params() map[string]string { return map[string]string{"path": s.Path} }

// Text implements Step.
func (s EnsurePool) Text() string {
	return fmt.Sprintf("make sure the dir storage pool %s at %s exists", s.Pool, s.Path)
}

// Do implements Step.
func (s EnsurePool) Do(ctx context.Context, env Env) error {
	return env.Conn().EnsureDirPool(ctx, s.Pool, s.Path)
}

// Undo does nothing: the pool is shared by every VM.
func (EnsurePool) Undo(context.Context, Env) error { return nil }

// CreateOverlay creates qcow2 volume Volume in Pool over Backing.
type CreateOverlay struct {
	Volume, Pool           string
	Backing, BackingFormat string
	Size                   uint64
	// Path is where the volume lands (for Text); not journalled.
	Path string
}

// Action implements Step.
func (CreateOverlay) Action() Action { return ActCreateOverlay }

// Target is the volume's name.
func (s CreateOverlay) Target() string { return s.Volume }

// Params records pool, backing image and size.
func (s CreateOverlay) Params() map[string]string {
	return map[string]string{"pool": s.Pool, "backing": s.Backing, "backing_format": s.BackingFormat, "size": strconv.FormatUint(s.Size, 10)}
}

// Text implements Step.
func (s CreateOverlay) Text() string {
	return fmt.Sprintf("create qcow2 overlay %s over %s (%s)", orVolume(s.Path, s.Volume), s.Backing, s.BackingFormat)
}

// Do implements Step.
func (s CreateOverlay) Do(ctx context.Context, env Env) error {
	return env.Conn().CreateVolume(ctx, poolOr(s.Pool, env), virt.Volume{Name: s.Volume, Format: "qcow2", Capacity: s.Size,
		BackingPath: s.Backing, BackingFormat: s.BackingFormat})
}

// Undo implements Step.
func (s CreateOverlay) Undo(ctx context.Context, env Env) error {
	return env.Conn().DeleteVolume(ctx, poolOr(s.Pool, env), s.Volume)
}

// CreateBlank creates an empty volume Volume of Size bytes in Pool (a disk to install onto).
type CreateBlank struct {
	Volume, Pool string
	Format       string // qcow2 or raw
	Size         uint64
	// Path is where the volume lands (for Text); not journalled.
	Path string
}

// Action implements Step.
func (CreateBlank) Action() Action { return ActCreateBlank }

// Target is the volume's name.
func (s CreateBlank) Target() string { return s.Volume }

// Params records pool, format and size.
func (s CreateBlank) Params() map[string]string {
	return map[string]string{"pool": s.Pool, "format": s.Format, "size": strconv.FormatUint(s.Size, 10)}
}

// Text implements Step.
func (s CreateBlank) Text() string {
	return fmt.Sprintf("create blank %s disk %s of %d bytes", s.Format, orVolume(s.Path, s.Volume), s.Size)
}

// Do implements Step.
func (s CreateBlank) Do(ctx context.Context, env Env) error {
	return env.Conn().CreateVolume(ctx, poolOr(s.Pool, env), virt.Volume{Name: s.Volume, Format: s.Format, Capacity: s.Size})
}

// Undo deletes the volume.
func (s CreateBlank) Undo(ctx context.Context, env Env) error {
	return env.Conn().DeleteVolume(ctx, poolOr(s.Pool, env), s.Volume)
}

// WriteSeed uploads the VM's cloud-init NoCloud seed ISO as volume Volume of Pool.
type WriteSeed struct {
	Volume, Pool string
	// Path is where the volume lands (for Text); not journalled.
	Path string
}

// Action implements Step.
func (WriteSeed) Action() Action { return ActWriteSeed }

// Target is the volume's name.
func (s WriteSeed) Target() string { return s.Volume }

// Params records the pool.
func (s WriteSeed) Params() map[string]string { return map[string]string{"pool": s.Pool} }

// Text implements Step.
func (s WriteSeed) Text() string {
	return fmt.Sprintf("write cloud-init seed %s (label cidata)", orVolume(s.Path, s.Volume))
}

// Do implements Step.
func (s WriteSeed) Do(ctx context.Context, env Env) error {
	iso, err := env.SeedISO()
	if err != nil {
		return err
	}
	return env.Conn().UploadVolume(ctx, poolOr(s.Pool, env), s.Volume, iso)
}

// Undo implements Step.
func (s WriteSeed) Undo(ctx context.Context, env Env) error {
	return env.Conn().DeleteVolume(ctx, poolOr(s.Pool, env), s.Volume)
}

// FetchISO downloads URL as File in the pool directory, verifying Checksum as it streams
// (Env.Fetch). The file is a cache shared by every VM that names the same ISO: a second
// apply finds it (by its recorded checksum) and downloads nothing, and Undo leaves it.
type FetchISO struct {
	File, URL, Checksum string
}

// Action implements Step.
func (FetchISO) Action() Action { return ActFetchISO }

// Target is the file's name in the pool directory.
func (s FetchISO) Target() string { return s.File }

// Params records the URL and checksum.
func (s FetchISO) Params() map[string]string {
	return map[string]string{"url": s.URL, "checksum": s.Checksum}
}

// Text implements Step.
func (s FetchISO) Text() string {
	return fmt.Sprintf("fetch %s into the pool as %s (%s), unless it is there already", s.URL, s.File, s.Checksum)
}

// Do implements Step.
func (s FetchISO) Do(ctx context.Context, env Env) error {
	if err := os.MkdirAll(env.PoolDir(), 0o755); err != nil {
		return fmt.Errorf("fetch %s: %w", s.URL, err)
	}
	return env.Fetch(ctx, s.URL, s.Checksum, filepath.Join(env.PoolDir(), s.File))
}

// Undo leaves the file: it is a verified cache other VMs may use (docs/spec.md).
func (FetchISO) Undo(context.Context, Env) error { return nil }

// Define defines the libvirt domain VM (type VirtType) from the plan's XML.
type Define struct {
	VM, VirtType string
	// HotplugSlots is spec.hotplugSlots: the empty PCIe root ports the defined domain keeps
	// (virt.ReserveRootPorts; docs/hotplug.md).
	HotplugSlots int
}

// Action implements Step.
func (Define) Action() Action { return ActDefine }

// Target is the domain's name.
func (s Define) Target() string { return s.VM }

// Params records the hotplug ports when the spec asks for some; the undo needs the name only.
func (s Define) Params() map[string]string {
	if s.HotplugSlots > 0 {
		return map[string]string{"hotplug_slots": strconv.Itoa(s.HotplugSlots)}
	}
	return nil
}

// Text implements Step.
func (s Define) Text() string { return fmt.Sprintf("define domain %s (type %s)", s.VM, s.VirtType) }

// Do implements Step.
func (s Define) Do(ctx context.Context, env Env) error {
	if _, err := env.Conn().Define(ctx, env.DomainXML()); err != nil {
		return err
	}
	_, err := virt.ReserveRootPorts(ctx, env.Conn(), s.VM, s.HotplugSlots)
	return err
}

// Undo stops the domain if it runs and undefines it.
func (s Define) Undo(ctx context.Context, env Env) error {
	err := env.Conn().Destroy(ctx, s.VM)
	if err == nil || virt.IsNotFound(err) {
		err = env.Conn().Undefine(ctx, s.VM)
	}
	return err
}

// Start starts the domain VM.
type Start struct {
	VM string
}

// Action implements Step.
func (Start) Action() Action { return ActStart }

// Target is the domain's name.
func (s Start) Target() string { return s.VM }

// Params is empty.
func (Start) Params() map[string]string { return nil }

// Text implements Step.
func (s Start) Text() string { return "start domain " + s.VM }

// Do implements Step.
func (s Start) Do(ctx context.Context, env Env) error { return env.Conn().Start(ctx, s.VM) }

// Undo stops it.
func (s Start) Undo(ctx context.Context, env Env) error { return env.Conn().Destroy(ctx, s.VM) }

func poolOr(pool string, env Env) string {
	if pool != "" {
		return pool
	}
	return env.Pool()
}

func orVolume(path, volume string) string {
	if path != "" {
		return path
	}
	return volume
}

// InPool reports whether path is a volume in the pool directory dir (overlays and seeds are
// created there only).
func InPool(path, dir string) bool { return filepath.Dir(path) == filepath.Clean(dir) }
