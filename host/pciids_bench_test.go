package host_test

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// BenchmarkPCIIDsCold is what one `vgpu-host inspect` process pays for names: the first load
// of pci.ids and the lookups of a workstation's IDs (each process starts cold).
func BenchmarkPCIIDsCold(b *testing.B) {
	ids := host.NewPCIIDsFile("/usr/share/misc/pci.ids")
	if ids.Path() == "" {
		b.Skip("no /usr/share/misc/pci.ids")
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p := host.NewPCIIDsFile("/usr/share/misc/pci.ids")
		for _, d := range [][2]string{{"10de", "2206"}, {"10de", "1aef"}, {"8086", "1593"}, {"8086", "1889"}, {"8086", "7a00"}, {"8086", "7a01"}, {"1000", "c030"}, {"8086", "7a02"}} {
			p.Vendor(d[0])
			p.Device(d[0], d[1])
		}
		p.Subsystem("10de", "2206", "1462", "3892")
		for _, c := range []string{"030000", "040300", "020000", "060400", "010802", "0c0330", "0c0500", "078000"} {
			p.Class(c)
		}
	}
}
