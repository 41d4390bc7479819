package host

import "testing"

// parseUevent takes only well-formed PCI lines: a field it cannot parse is left to its own
// file (has* false), never guessed.
func TestParseUevent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want identity
	}{
		{"DRIVER=nvidia\nPCI_CLASS=30200\nPCI_ID=10DE:26B9\nPCI_SUBSYS_ID=10de:1851\nPCI_SLOT_NAME=0000:41:00.0\nMODALIAS=pci:v000010DEd000026B9\n",
			identity{class: 0x030200, vendor: 0x10de, device: 0x26b9, subVendor: 0x10de, subDevice: 0x1851, hasClass: true, hasIDs: true, hasSubsys: true, driver: "nvidia"}},
		{"PCI_CLASS=C0330\nPCI_ID=8086:7A60", // no driver, no newline at the end, no subsystem line
			identity{class: 0x0c0330, vendor: 0x8086, device: 0x7a60, hasClass: true, hasIDs: true}},
		{"", identity{}},
		{"PCI_CLASS=\nPCI_ID=10DE\nPCI_SUBSYS_ID=:1851\n", identity{}},
		{"PCI_CLASS=0x30000\nPCI_ID=10DE:26B9X\nPCI_SUBSYS_ID=10DE:-1\n", identity{}},
		{"PCI_CLASS=123456789\nPCI_ID=10DEE:26B9\nPCI_SUBSYS_ID=10DE:12345\n", identity{}},
		{"PCI_CLASS 30000\npci_id=10DE:26B9\n=\n\n", identity{}},
	} {
		if got := parseUevent([]byte(c.in)); got != c.want {
			t.Errorf("parseUevent(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
