package native

import (
	"errors"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-host/vgpu-host/host"
)

// TestValidateDomainAgreesWithLibvirt: the schema check Define makes itself gives libvirt's own
// verdict (VIR_DOMAIN_DEFINE_VALIDATE on the test driver, which validates against the same
// schema file) on valid and invalid domains, and names the line; and it is much cheaper than
// asking libvirt, which is why Define does it.
func TestValidateDomainAgreesWithLibvirt(t *testing.T) {
	conn, err := libvirt.NewConnect("test:///default")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dom := func(name, devices string) string {
		return "<domain type='test'>\n<name>" + name + "</name>\n<memory unit='MiB'>64</memory>\n<os><type>hvm</type></os>\n<devices>" + devices + "</devices>\n</domain>"
	}
	cases := []struct {
		name, xml string
		valid     bool
		want      string
	}{
		{"valid", dom("v1", "<watchdog model='i6300esb' action='reset'/>"), true, ""},
		{"unknown element", dom("v2", "<frobnicator/>"), false, "line 5"},
		{"bad attribute value", dom("v3", "<watchdog model='i6300esb' action='explode'/>"), false, "line 5"},
		{"unknown attribute", dom("v4", "<watchdog model='i6300esb' colour='blue'/>"), false, "line 5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, err := ValidateDomain(c.xml)
			if !ok {
				t.Fatalf("schema %s not available", DomainSchema)
			}
			d, lerr := conn.DomainDefineXMLFlags(c.xml, libvirt.DOMAIN_DEFINE_VALIDATE)
			if lerr == nil {
				d.Undefine()
				d.Free()
			}
			if (err == nil) != c.valid || (lerr == nil) != c.valid {
				t.Fatalf("ours: %v; libvirt's: %v; want valid=%v", err, lerr, c.valid)
			}
			if err != nil && (!errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%v: want ErrInvalid naming %s", err, c.want)
			}
		})
	}
	x := cases[0].xml
	t0 := time.Now()
	for range 20 {
		if _, err := ValidateDomain(x); err != nil {
			t.Fatal(err)
		}
	}
	ours := time.Since(t0) / 20
	t0 = time.Now()
	for range 5 {
		d, err := conn.DomainDefineXMLFlags(x, libvirt.DOMAIN_DEFINE_VALIDATE)
		if err != nil {
			t.Fatal(err)
		}
		d.Undefine()
		d.Free()
	}
	theirs := time.Since(t0) / 5
	t.Logf("validation: %s against the compiled schema, %s for libvirt's validated define", ours, theirs)
}
