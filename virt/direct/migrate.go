package direct

import (
	"context"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-host/vgpu-host/virt"
)

// MigratableXML returns the running domain's live XML as a migration would send it.
func (c *Conn) MigratableXML(_ context.Context, name string) (string, error) {
	d, err := c.domain(name)
	if err != nil {
		return "", err
	}
	x, err := c.l.DomainGetXMLDesc(d, libvirt.DomainXMLMigratable|libvirt.DomainXMLSecure)
	return x, c.err(err, "migratable XML of domain "+name)
}

// Migrate migrates the running domain live and peer to peer to o.DestURI: one
// virDomainMigratePerform3Params call, as libvirt's own client makes for
// virDomainMigrateToURI3 with VIR_MIGRATE_PEER2PEER (the source libvirtd runs the whole
// protocol with the target). A ctx that ends aborts the job.
func (c *Conn) Migrate(ctx context.Context, name string, o virt.MigrateOptions) error {
	if err := o.Check(); err != nil {
		return err
	}
	d, err := c.domain(name)
	if err != nil {
		return err
	}
	var params []libvirt.TypedParam
	str := func(field, v string) {
		if v != "" {
			params = append(params, libvirt.TypedParam{Field: field, Value: *libvirt.NewTypedParamValueString(v)})
		}
	}
	// libvirt's VIR_MIGRATE_PARAM_URI, _DEST_XML, _PERSIST_XML.
	str("migrate_uri", o.MigrateURI)
	str("destination_xml", o.DestXML)
	str("persistent_xml", o.PersistXML)
	flags := libvirt.MigrateLive | libvirt.MigratePeer2peer | libvirt.MigratePersistDest | libvirt.MigrateUndefineSource
	if o.CopyStorage {
		flags |= libvirt.MigrateNonSharedDisk
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = c.l.DomainAbortJob(d)
		case <-done:
		}
	}()
	_, err = c.l.DomainMigratePerform3Params(d, libvirt.OptString{o.DestURI}, params, nil, flags)
	return c.err(err, "migrate domain "+name+" to "+o.DestURI)
}
