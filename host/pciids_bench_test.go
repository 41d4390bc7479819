package host_test

import (
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// BenchmarkPCIIDsCold is what one `vgpu-host inspect` process pays for names: the first load
// of pci.ids, then the lookups of a host's IDs, as Scan makes them last (each process starts
// cold). cpu-ms/op counts every goroutine's CPU time. workstation: an
// NVIDIA and Intel workstation's; qemu: the real-kernel snapshots' (QEMU q35: Intel, Red Hat,
// AMD, and QEMU's 1234, which pci.ids lacks).
func BenchmarkPCIIDsCold(b *testing.B) {
	if host.NewPCIIDsFile("/usr/share/misc/pci.ids").Path() == "" {
		b.Skip("no /usr/share/misc/pci.ids")
	}
	for _, c := range []struct {
		name    string
		devices [][2]string
		subsys  [4]string
		classes []string
	}{
		{"workstation", [][2]string{{"10de", "2206"}, {"10de", "1aef"}, {"8086", "1593"}, {"8086", "1889"}, {"8086", "7a00"}, {"8086", "7a01"}, {"1000", "c030"}, {"8086", "7a02"}},
			[4]string{"10de", "2206", "1462", "3892"}, []string{"030000", "040300", "020000", "060400", "010802", "0c0330", "0c0500", "078000"}},
		{"qemu", [][2]string{{"1b36", "0100"}, {"1af4", "1050"}, {"1002", "5046"}, {"8086", "2668"}, {"1b36", "000e"}, {"1234", "1111"}, {"8086", "100e"}, {"1b36", "0010"}},
			[4]string{"1af4", "1050", "1af4", "1100"}, []string{"030000", "038000", "040300", "060400", "020000"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for i := 0; i < b.N; i++ {
				p := host.NewPCIIDsFile("/usr/share/misc/pci.ids")
				for _, d := range c.devices {
					p.Vendor(d[0])
					p.Device(d[0], d[1])
				}
				p.Subsystem(c.subsys[0], c.subsys[1], c.subsys[2], c.subsys[3])
				for _, cl := range c.classes {
					p.Class(cl)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/1e6/float64(b.N), "cpu-ms/op")
		})
	}
}
