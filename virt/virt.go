// Package virt is vgpu-host's one adapter over libvirt (libvirt.org/go/libvirt): a narrow,
// name-based interface (Conn) that the lifecycle code uses, a real implementation that talks
// to libvirtd, and a fake (NewFake) for unit tests. Nothing else in vgpu-host imports the
// libvirt binding, so most tests need no daemon (KubeVirt's virtwrap/cli does the same).
package virt

import (
	"context"
	"errors"
)

// DefaultURI is the libvirt connection vgpu-host uses unless --connect says otherwise.
const DefaultURI = "qemu:///system"

// State is a domain's run state, reduced to what the lifecycle needs.
type State string

// Domain states.
const (
	StateRunning  State = "running"
	StateShutoff  State = "shutoff"
	StatePaused   State = "paused"
	StateShutdown State = "shutting-down"
	StateCrashed  State = "crashed"
	StateOther    State = "other"
)

// ErrNoDomain, ErrNoVolume and ErrNoPool are returned (wrapped) when the named object does
// not exist; they also satisfy errors.Is(err, host.ErrNotFound) through NotFound.
var (
	ErrNoDomain = errors.New("no such domain")
	ErrNoVolume = errors.New("no such storage volume")
	ErrNoPool   = errors.New("no such storage pool")
	// ErrVolumeExists is returned (wrapped) by CreateVolume when the pool has a volume of
	// that name already: the caller did not create it and must not delete it.
	ErrVolumeExists = errors.New("storage volume exists")
	// ErrConnection is returned (wrapped) when the connection to libvirtd itself failed (libvirtd
	// restarted, its socket closed, the helper process died): the Conn is dead, and a caller
	// that holds one for long (the agent) opens another.
	ErrConnection = errors.New("libvirt connection lost")
)

// IsNotFound reports whether err says a domain, volume or pool does not exist.
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNoDomain) || errors.Is(err, ErrNoVolume) || errors.Is(err, ErrNoPool)
}

// Volume describes a storage volume to create.
type Volume struct {
	// Name is the volume's name in its pool (also its file name in a dir pool).
	Name string
	// Format is the volume's format: "qcow2" or "raw".
	Format string
	// Capacity is the virtual size in bytes. For an overlay 0 means "the backing file's size".
	Capacity uint64
	// BackingPath and BackingFormat make the volume a copy-on-write overlay of a base image.
	BackingPath   string
	BackingFormat string
}

// Conn is the narrow interface over one libvirt connection. Methods take domain, pool and
// volume names; errors name the object and wrap ErrNoDomain/ErrNoVolume/ErrNoPool when it
// does not exist.
type Conn interface {
	// URI returns the connection URI.
	URI() string
	// Close releases the connection.
	Close() error

	// VirtTypes returns the domain types the hypervisor offers for x86_64 guests, best
	// first: ["kvm", "qemu"] on a host with /dev/kvm, ["qemu"] without.
	VirtTypes(ctx context.Context) ([]string, error)

	// Define defines (or redefines) a persistent domain from XML and returns its name.
	Define(ctx context.Context, xml string) (string, error)
	// Start starts a defined domain. Starting a running domain is not an error.
	Start(ctx context.Context, name string) error
	// Shutdown asks the guest to power off (ACPI); it returns at once.
	Shutdown(ctx context.Context, name string) error
	// Destroy stops the domain at once. Destroying a stopped domain is not an error.
	Destroy(ctx context.Context, name string) error
	// Undefine removes the domain's persistent definition, its NVRAM file and managed save.
	Undefine(ctx context.Context, name string) error
	// State returns the domain's state.
	State(ctx context.Context, name string) (State, error)
	// DomainXML returns the domain's persistent (inactive) XML.
	DomainXML(ctx context.Context, name string) (string, error)
	// ListDomainXMLs returns the XML of every domain on the connection, active or not, keyed
	// by name: the lifecycle reads hostdevs from it to see devices held by domains vgpu-host
	// did not create.
	ListDomainXMLs(ctx context.Context) (map[string]string, error)
	// QMP sends a QMP command (JSON) to the domain's QEMU monitor through libvirt's
	// passthrough (virDomainQemuMonitorCommand) and returns the JSON reply.
	QMP(ctx context.Context, name, command string) (string, error)

	// EnsureDirPool makes sure a started directory pool named name at path exists, defining,
	// building and starting it when needed.
	EnsureDirPool(ctx context.Context, name, path string) error
	// CreateVolume creates a volume in pool. It fails if the volume exists.
	CreateVolume(ctx context.Context, pool string, v Volume) error
	// UploadVolume creates (or replaces) a raw volume holding data.
	UploadVolume(ctx context.Context, pool, name string, data []byte) error
	// VolumePath returns the file path of a volume.
	VolumePath(ctx context.Context, pool, name string) (string, error)
	// DeleteVolume deletes a volume. Deleting a missing volume returns an error wrapping
	// ErrNoVolume.
	DeleteVolume(ctx context.Context, pool, name string) error

	// Migrator live-migrates a domain to another libvirtd (migrate.go).
	Migrator
	// Hotplug (virt/hotplug.go says more).

	// AttachDevice adds one device (its XML: a <hostdev> or <video>) to the domain, in the
	// running guest (DeviceLive) and/or its persistent definition (DeviceConfig).
	AttachDevice(ctx context.Context, name, deviceXML string, scope DeviceScope) error
	// DetachDevice asks for one device to be removed. Live, it returns once the guest was
	// asked: the guest releases the device later (WaitDeviceGone).
	DetachDevice(ctx context.Context, name, deviceXML string, scope DeviceScope) error
	// LiveDomainXML returns the running domain's live XML (the persistent XML when stopped).
	LiveDomainXML(ctx context.Context, name string) (string, error)
}

// DomainEvent is one libvirt domain lifecycle event (virConnectDomainEventRegisterAny with
// VIR_DOMAIN_EVENT_ID_LIFECYCLE).
type DomainEvent struct {
	// Domain is the domain's name.
	Domain string `json:"domain"`
	// Event is the lifecycle event: "defined", "undefined", "started", "suspended",
	// "resumed", "stopped", "shutdown", "pmsuspended", "crashed" (libvirt's
	// VIR_DOMAIN_EVENT_*), "other" for one this list does not know.
	Event string `json:"event"`
	// Detail is libvirt's detail code of the event (e.g. for "undefined": 0 removed, 1 renamed).
	Detail int `json:"detail"`
}

// EventSource is a Conn that streams domain lifecycle events. The channel closes when ctx
// ends or the connection is lost (the caller subscribes again on a new connection). Events
// may be dropped when the receiver falls far behind: treat one as "look again", not as the
// whole truth.
type EventSource interface {
	DomainEvents(ctx context.Context) (<-chan DomainEvent, error)
}
