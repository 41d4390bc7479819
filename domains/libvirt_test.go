package domains_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"
)

// TestDefineOnTestDriver lets libvirt judge every example: DOMAIN_DEFINE_VALIDATE checks the
// RNG schema (without it the test driver silently drops what it doesn't know).
func TestDefineOnTestDriver(t *testing.T) {
	conn, err := libvirt.NewConnect("test:///default")
	if err != nil {
		t.Fatalf("connect test:///default: %v", err)
	}
	defer conn.Close()
	for _, r := range renderExamples(t) {
		dom, err := conn.DomainDefineXMLFlags(r.xml, libvirt.DOMAIN_DEFINE_VALIDATE)
		if err != nil {
			t.Errorf("%s: libvirt refused the domain: %v", r.name, err)
			continue
		}
		// What libvirt kept must still name the devices we asked for.
		back, err := dom.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE)
		if err != nil {
			t.Errorf("%s: dumpxml: %v", r.name, err)
		}
		if strings.Contains(r.xml, "<hostdev") && !strings.Contains(back, "<hostdev") {
			t.Errorf("%s: libvirt dropped the hostdevs", r.name)
		}
		if err := dom.Undefine(); err != nil {
			t.Errorf("%s: undefine: %v", r.name, err)
		}
		dom.Free()
	}
}

// TestVirtXMLValidate runs libvirt's own schema validator (libvirt-clients + xmllint) over
// every rendering.
func TestVirtXMLValidate(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		skipOrFail(t, "virt-xml-validate not installed (libvirt-clients)")
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		skipOrFail(t, "xmllint not installed (libxml2-utils), virt-xml-validate needs it")
	}
	dir := t.TempDir()
	for _, r := range renderExamples(t) {
		p := filepath.Join(dir, r.name+".xml")
		if err := os.WriteFile(p, []byte(r.xml), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("virt-xml-validate", p, "domain").CombinedOutput()
		if err != nil {
			t.Errorf("%s: virt-xml-validate: %v\n%s", r.name, err, out)
		}
	}
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}
