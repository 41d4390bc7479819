package virt

import (
	"context"
	"fmt"

	"github.com/vgpu-host/vgpu-host/host"
)

// MigrateOptions say how Migrate moves a running domain to another libvirtd. Migrate always
// migrates live and peer to peer (the source libvirtd connects to DestURI itself), makes the
// domain persistent on the target and undefines it on the source: libvirt's
// VIR_MIGRATE_LIVE|PEER2PEER|PERSIST_DEST|UNDEFINE_SOURCE, with DestXML and PersistXML.
type MigrateOptions struct {
	// DestURI is the target libvirtd's URI as the source libvirtd reaches it
	// (qemu+ssh://host/system, qemu+unix:///system?socket=PATH).
	DestURI string `json:"dest_uri"`
	// MigrateURI is where QEMU's migration stream goes (tcp://ADDR[:PORT]); empty lets the
	// target choose (its host name, which must not resolve to localhost).
	MigrateURI string `json:"migrate_uri,omitempty"`
	// DestXML is the domain's live XML on the target (its host devices rewritten for the
	// target's); empty keeps the source's.
	DestXML string `json:"dest_xml,omitempty"`
	// PersistXML is the domain's persistent definition on the target; empty makes it from
	// DestXML.
	PersistXML string `json:"persist_xml,omitempty"`
	// CopyStorage copies every writable disk to the target while the guest runs
	// (VIR_MIGRATE_NON_SHARED_DISK): for disks that are not on storage both hosts share.
	CopyStorage bool `json:"copy_storage,omitempty"`
}

// Check says what is wrong with o, or nil.
func (o MigrateOptions) Check() error {
	if o.DestURI == "" {
		return fmt.Errorf("migrate: no target libvirt URI: %w", host.ErrInvalid)
	}
	return nil
}

// Migrator is the part of Conn that live-migrates a domain to another libvirtd.
type Migrator interface {
	// MigratableXML returns the running domain's live XML as libvirt would send it to a
	// target (VIR_DOMAIN_XML_MIGRATABLE|SECURE): the base of the target's XML.
	MigratableXML(ctx context.Context, name string) (string, error)
	// Migrate moves the running domain name to o.DestURI (see MigrateOptions) and returns when
	// it runs there and is gone here, or with libvirt's reason, the domain still here. A ctx
	// that ends aborts the migration job.
	Migrate(ctx context.Context, name string, o MigrateOptions) error
}
