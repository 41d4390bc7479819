package native

import (
	"context"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-host/vgpu-host/virt"
)

// MigratableXML returns the running domain's live XML as a migration would send it.
func (l *Libvirt) MigratableXML(_ context.Context, name string) (string, error) {
	d, err := l.domain(name)
	if err != nil {
		return "", err
	}
	defer d.Free()
	x, err := d.GetXMLDesc(libvirt.DOMAIN_XML_MIGRATABLE | libvirt.DOMAIN_XML_SECURE)
	return x, lverr(err, "migratable XML of domain "+name)
}

// Migrate migrates the running domain live and peer to peer to o.DestURI
// (virDomainMigrateToURI3 with VIR_MIGRATE_LIVE|PEER2PEER|PERSIST_DEST|UNDEFINE_SOURCE, and
// NON_SHARED_DISK for o.CopyStorage). A ctx that ends aborts the job (virDomainAbortJob): the
// domain keeps running here.
func (l *Libvirt) Migrate(ctx context.Context, name string, o virt.MigrateOptions) error {
	if err := o.Check(); err != nil {
		return err
	}
	d, err := l.domain(name)
	if err != nil {
		return err
	}
	defer d.Free()
	p := &libvirt.DomainMigrateParameters{}
	if o.MigrateURI != "" {
		p.URISet, p.URI = true, o.MigrateURI
	}
	if o.DestXML != "" {
		p.DestXMLSet, p.DestXML = true, o.DestXML
	}
	if o.PersistXML != "" {
		p.PersistXMLSet, p.PersistXML = true, o.PersistXML
	}
	flags := libvirt.MIGRATE_LIVE | libvirt.MIGRATE_PEER2PEER | libvirt.MIGRATE_PERSIST_DEST | libvirt.MIGRATE_UNDEFINE_SOURCE
	if o.CopyStorage {
		flags |= libvirt.MIGRATE_NON_SHARED_DISK
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = d.AbortJob()
		case <-done:
		}
	}()
	return lverr(d.MigrateToURI3(o.DestURI, p, flags), "migrate domain "+name+" to "+o.DestURI)
}
