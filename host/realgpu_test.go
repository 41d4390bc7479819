package host_test

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// realGPUHosts are the real NVIDIA hosts captured read-only (hosttest.Capture): the H200 of
// ../shared/fixtures and the H100 of testdata/nvidia-h100, each with its sysfs and what
// nvidia-smi -q printed on the same machine at the same time.
var realGPUHosts = []string{"nvidia-h200", "nvidia-h100"}

// smiQ reads the fields of nvidia-smi -q's first GPU that sysfs also holds.
func smiQ(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	field := regexp.MustCompile(`^(\s*)(Bus Id|Device Id|Sub System Id|Product Name|Total)\s+: (\S+)`)
	out := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) != "" && !strings.Contains(line, ":") {
			section = strings.TrimSpace(line)
		}
		m := field.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key := m[2]
		if key == "Total" {
			key = section + " Total" // "BAR1 Memory Usage Total", "FB Memory Usage Total", …
		}
		if _, seen := out[key]; !seen {
			out[key] = m[3]
		}
	}
	return out
}

// Scan of a real GPU host's sysfs agrees with what NVIDIA's own tool printed on that host: the
// GPU's address, its vendor, device and subsystem IDs, its driver, and the size of BAR1 (PCI
// BAR 2 on these GPUs), which is what decides whether a guest's firmware can map it.
func TestScanAgreesWithNvidiaSMI(t *testing.T) {
	t.Parallel()
	for _, name := range realGPUHosts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := smiQ(t, hosttest.Capture(t, name+"/nvidia-smi-q.txt"))
			for _, k := range []string{"Bus Id", "Device Id", "Sub System Id", "BAR1 Memory Usage Total"} {
				if q[k] == "" {
					t.Fatalf("nvidia-smi -q of %s has no %q: %v", name, k, q)
				}
			}
			inv, err := host.Scan(hosttest.Snapshot(t, hosttest.Capture(t, name+"/sysfs-snapshot.tar.gz")))
			if err != nil {
				t.Fatal(err)
			}
			// nvidia-smi prints the domain in 8 digits (00000000:00:06.0), sysfs in 4.
			addr := strings.ToLower(q["Bus Id"][4:])
			var gpu *host.Device
			for i := range inv.Devices {
				if inv.Devices[i].Address.String() == addr {
					gpu = &inv.Devices[i]
				}
			}
			if gpu == nil {
				t.Fatalf("no device %s in the scan of %s's sysfs", addr, name)
			}
			// Device Id 0x233010DE: device 2330, vendor 10de.
			id := strings.ToLower(strings.TrimPrefix(q["Device Id"], "0x"))
			sub := strings.ToLower(strings.TrimPrefix(q["Sub System Id"], "0x"))
			if got, want := gpu.DeviceID+gpu.VendorID, id; got != want {
				t.Errorf("%s: device+vendor %s, nvidia-smi %s", addr, got, want)
			}
			if got, want := gpu.SubsysDeviceID+gpu.SubsysVendorID, sub; got != want {
				t.Errorf("%s: subsystem %s, nvidia-smi %s", addr, got, want)
			}
			if gpu.Driver != "nvidia" || !gpu.IsGPU {
				t.Errorf("%s: driver %q, GPU %v; nvidia-smi answered through the nvidia driver", addr, gpu.Driver, gpu.IsGPU)
			}
			var bar2 uint64
			for _, b := range gpu.BARs {
				if b.Index == 2 {
					bar2 = b.Size
				}
			}
			if got, want := fmt.Sprintf("%d", bar2>>20), q["BAR1 Memory Usage Total"]; got != want {
				t.Errorf("%s: BAR 2 is %d MiB, nvidia-smi's BAR1 total %s MiB", addr, bar2>>20, want)
			}
		})
	}
}

// How a real GPU is named when pci.ids lists it and when it does not: the H200 capture's GPU
// reads "NVIDIA Corporation Device 2335" (as lspci prints it), not the vendor alone, and a
// model selector's hint names it with the IDs to select it by; the H100 has its pci.ids name
// and no hint.
func TestTitleOfRealGPUs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ host, title, hint string }{
		{"nvidia-h200", "NVIDIA Corporation Device 2335", `pci.ids names no device for 0000:00:06.0 (10de:2335), so no model matches it: select by ID (vendor: "10de", device: "2335")`},
		{"nvidia-h100", "NVIDIA Corporation GH100[H100 SXM5 80GB]", ""},
	} {
		t.Run(tc.host, func(t *testing.T) {
			t.Parallel()
			inv, err := host.Scan(hosttest.RealGPUSnapshot(t, tc.host+"/sysfs-snapshot.tar.gz"))
			if err != nil {
				t.Fatal(err)
			}
			var titles []string
			for i := range inv.Devices {
				if inv.Devices[i].IsGPU {
					titles = append(titles, inv.Devices[i].Title())
				}
			}
			if len(titles) != 1 || titles[0] != tc.title {
				t.Errorf("GPU titles %q, want [%q]", titles, tc.title)
			}
			hint := host.UnnamedGPUsHint(inv.Devices)
			if tc.hint == "" && hint != "" || !strings.HasPrefix(hint, tc.hint) {
				t.Errorf("hint %q, want it to start %q", hint, tc.hint)
			}
		})
	}
	// Without a vendor name either, the IDs.
	d := host.Device{VendorID: "10de", DeviceID: "2335"}
	if got := d.Title(); got != "10de:2335" {
		t.Errorf("no names: %q", got)
	}
}
