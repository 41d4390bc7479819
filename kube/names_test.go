package kube_test

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/kube"
)

// isExtendedResourceName is the kubelet's check, copied from k8s.io/kubernetes v1.37.2
// pkg/apis/core/v1/helper/helpers.go IsExtendedResourceName (with IsNativeResource and
// IsPrefixedNativeResource inlined) over the upstream validation.IsQualifiedName. The device
// manager refuses a Register whose resource name fails it
// (pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go). k8s.io/kubernetes is not a module
// this one can require, hence the copy.
func isExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, corev1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(name, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+name)) == 0
}

// debianPCIIDs is Debian's pci.ids (package pci.ids, in scripts/deps.sh's test list).
const debianPCIIDs = "/usr/share/misc/pci.ids"

// TestPCIIDsResourceNamesValid: every device of Debian's pci.ids (a superset of the display-class
// ones: pci.ids does not say a device's class) gets a resource name the kubelet registers, the
// same name every time, and a name of its own unless its pci.ids name differs from another's
// only in case, spaces or punctuation (the spelling NVIDIA's plugin shares a resource by).
// Before names were bounded, 10de:24fa gave "nvidia.com/GA104_RTX_A4500_EMBEDDED_GPU_" and
// 1002:6900 a 79-character name part, both refused by the kubelet.
func TestPCIIDsResourceNamesValid(t *testing.T) {
	f, err := os.Open(debianPCIIDs)
	if err != nil {
		t.Skipf("no pci.ids (scripts/deps.sh installs Debian's pci.ids): %v", err)
	}
	defer f.Close()
	ids := host.NewPCIIDsFile(debianPCIIDs)
	vendorRE := regexp.MustCompile(`^([0-9a-f]{4})  `)
	deviceRE := regexp.MustCompile(`^\t([0-9a-f]{4})  `)
	fold := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, strings.ToUpper(s))
	}
	owner := map[string]string{} // resource name → folded pci.ids name
	vendor, n, cut := "", 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "C ") {
			break // the class section
		}
		if m := vendorRE.FindStringSubmatch(line); m != nil {
			vendor = m[1]
			continue
		}
		m := deviceRE.FindStringSubmatch(line)
		if m == nil || vendor == "" {
			continue
		}
		d := &host.Device{VendorID: vendor, DeviceID: m[1], DeviceName: ids.Device(vendor, m[1])}
		name := kube.Domain(vendor) + "/" + kube.PCIName(d)
		n++
		if len(d.DeviceName) > kube.MaxNameLen && len(kube.PCIName(d)) >= kube.MaxNameLen-1 {
			cut++
		}
		if !isExtendedResourceName(name) {
			t.Errorf("%s:%s %q → %q: the kubelet refuses it", vendor, d.DeviceID, d.DeviceName, name)
		}
		if err := kube.ValidResourceName(name); err != nil {
			t.Errorf("%s:%s: ValidResourceName disagrees with the kubelet: %v", vendor, d.DeviceID, err)
		}
		if again := kube.Domain(vendor) + "/" + kube.PCIName(&host.Device{VendorID: vendor, DeviceID: m[1], DeviceName: ids.Device(vendor, m[1])}); again != name {
			t.Errorf("%s:%s: %q then %q", vendor, d.DeviceID, name, again)
		}
		key := fold(d.DeviceName)
		if d.DeviceName == "" {
			key = vendor + ":" + d.DeviceID
		}
		if o, ok := owner[name]; ok && o != key {
			t.Errorf("%s:%s %q shares %q with a different model (%q)", vendor, d.DeviceID, d.DeviceName, name, o)
		}
		owner[name] = key
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 10000 {
		t.Fatalf("only %d devices read from %s", n, debianPCIIDs)
	}
	t.Logf("%d devices, %d resources, %d long names cut to at most %d characters", n, len(owner), cut, kube.MaxNameLen)
}

// TestResourceNamesKnownBad pins the names the kubelet refused before names were bounded.
func TestResourceNamesKnownBad(t *testing.T) {
	for _, c := range []struct{ vendor, device, name, want string }{
		{"10de", "24fa", "GA104 [RTX A4500 Embedded GPU ]", "nvidia.com/GA104_RTX_A4500_EMBEDDED_GPU"},
		{"10de", "20b5", "GA100 [A100 PCIe 80GB]", "nvidia.com/GA100_A100_PCIE_80GB"},
		{"10de", "20b5", "", "nvidia.com/PCI_10DE_20B5"},
		{"10de", "20b5", "[]", "nvidia.com/PCI_10DE_20B5"},
	} {
		got := kube.Domain(c.vendor) + "/" + kube.PCIName(&host.Device{VendorID: c.vendor, DeviceID: c.device, DeviceName: c.name})
		if got != c.want {
			t.Errorf("%q → %q, want %q", c.name, got, c.want)
		}
	}
	long := strings.Repeat("Navi 24 [Radeon RX 6400/6500 XT] ", 3)
	a := kube.PCIName(&host.Device{VendorID: "1002", DeviceID: "6900", DeviceName: long})
	b := kube.PCIName(&host.Device{VendorID: "1002", DeviceID: "6901", DeviceName: long + "x"})
	if len(a) > kube.MaxNameLen || len(a) < kube.MaxNameLen-1 || a == b || !isExtendedResourceName("amd.com/"+a) {
		t.Errorf("long names %q, %q", a, b)
	}
	for _, c := range []struct{ name, id, want string }{
		{"GRID A100-4C", "nvidia-471", "GRID_A100-4C"},
		{"", "mbochs-small", "mbochs-small"},
		{"-.-", "1160", "1160"},
		{"NVIDIA A100-4C ", "", "NVIDIA_A100-4C"},
	} {
		if got := kube.TypeName(c.name, c.id); got != c.want {
			t.Errorf("TypeName(%q, %q) = %q, want %q", c.name, c.id, got, c.want)
		}
	}
	for _, bad := range []string{"nvidia.com/X_", "nvidia.com/" + strings.Repeat("a", 64), "kubernetes.io/x", "requests.a/x", "x", "Nvidia.com/x"} {
		if kube.ValidResourceName(bad) == nil || isExtendedResourceName(bad) {
			t.Errorf("%q accepted (ours: %v, kubelet's: %v)", bad, kube.ValidResourceName(bad), isExtendedResourceName(bad))
		}
	}
}
