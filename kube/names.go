package kube

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
)

// KubeVirt's environment variable prefixes (kubevirt.io/api core/v1 PCIResourcePrefix and
// MDevResourcePrefix): virt-launcher reads the addresses of a resource from
// PCI_RESOURCE_<NAME> and the mdev UUIDs from MDEV_PCI_RESOURCE_<NAME>.
const (
	PCIResourcePrefix  = "PCI_RESOURCE"
	MdevResourcePrefix = "MDEV_PCI_RESOURCE"
)

// EnvVar returns the variable KubeVirt reads a resource's devices from, transformed exactly as
// KubeVirt's util.ResourceNameToEnvVar does: upper-case, "/" and "." become "_".
//
//	EnvVar(PCIResourcePrefix, "nvidia.com/GA100_A100_PCIE_80GB") = "PCI_RESOURCE_NVIDIA_COM_GA100_A100_PCIE_80GB"
func EnvVar(prefix, resourceName string) string {
	v := strings.ToUpper(resourceName)
	v = strings.ReplaceAll(v, "/", "_")
	v = strings.ReplaceAll(v, ".", "_")
	return prefix + "_" + v
}

// vendorDomains are the resource-name domains by PCI vendor id. Other vendors, and virtual
// mdev parents (mbochs, mdpy), get DefaultDomain.
var vendorDomains = map[string]string{
	"10de": "nvidia.com",
	"8086": "intel.com",
	"1002": "amd.com",
}

// DefaultDomain prefixes resource names of vendors without an entry in vendorDomains.
const DefaultDomain = "vgpu-host.io"

// Domain returns the resource-name domain of a PCI vendor id ("10de" → "nvidia.com").
func Domain(vendorID string) string {
	if d, ok := vendorDomains[strings.ToLower(vendorID)]; ok {
		return d
	}
	return DefaultDomain
}

// underscoreSpaces turns every run of white space into one "_" (and trims the ends).
func underscoreSpaces(s string) string { return strings.Join(strings.Fields(s), "_") }

// keep returns s without the runes ok rejects.
func keep(s string, ok func(r rune) bool) string {
	var b strings.Builder
	for _, r := range s {
		if ok(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isAlnum(r rune) bool {
	return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
}

// PCIName is the name part of a passthrough GPU's (or VF's) resource: the pci.ids device name
// the way NVIDIA's kubevirt-gpu-device-plugin spells it, so clusters moving from it keep their
// VM manifests: upper-case, "/" and "." and runs of spaces become "_", anything else that is
// not a letter, digit or "_" is dropped:
//
//	"GA100 [A100 PCIe 80GB]" → "GA100_A100_PCIE_80GB"
//
// Without a pci.ids name it is PCI_<VENDOR>_<DEVICE> ("PCI_10DE_20B5").
func PCIName(d *host.Device) string {
	n := strings.TrimSpace(d.DeviceName)
	if n == "" {
		return strings.ToUpper("PCI_" + d.VendorID + "_" + d.DeviceID)
	}
	n = strings.ToUpper(n)
	n = strings.NewReplacer("/", "_", ".", "_").Replace(n)
	n = underscoreSpaces(n)
	return keep(n, func(r rune) bool { return isAlnum(r) || r == '_' })
}

// TypeName is the name part of a vGPU type's resource: the type's name with runs of spaces
// as "_" (case and "-" kept), as NVIDIA's plugin and KubeVirt's documentation spell it, and
// anything outside [A-Za-z0-9_.-] dropped:
//
//	"GRID A100-4C" → "GRID_A100-4C"     "NVIDIA L40S-8Q" → "NVIDIA_L40S-8Q"
//
// A type without a name uses its id ("mbochs-small").
func TypeName(name, id string) string {
	n := strings.TrimSpace(name)
	if n == "" {
		n = id
	}
	n = underscoreSpaces(n)
	return keep(n, func(r rune) bool { return isAlnum(r) || r == '_' || r == '.' || r == '-' })
}

// Config is the plugin's configuration file (YAML), docs/kubevirt.md "Configuration":
//
//	resourceNames:
//	  "10de:20b5": nvidia.com/A100_80GB     # a passthrough model, by vendor:device
//	  "GRID A100-4C": nvidia.com/A100-4C    # a vGPU type, by name or type id (nvidia-471, 1160)
type Config struct {
	// ResourceNames overrides generated resource names. Keys are "vendor:device" (lower-case
	// hex) for passthrough GPUs and VFs, or a vGPU type's name or id.
	ResourceNames map[string]string `yaml:"resourceNames" json:"resourceNames,omitempty"`
}

// DefaultConfigPath is where the configuration lives under the host root.
const DefaultConfigPath = "etc/vgpu-host/kubernetes.yaml"

// resourceNameRE is compiled on first use: vgpu-host's start-up must not pay for it.
var resourceNameRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
})

// LoadConfig reads a configuration file strictly. A missing file at the default path is an
// empty configuration; set required for a path the user named.
func LoadConfig(path string, required bool) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read kubernetes config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("kubernetes config %s: %s: %w", path, strings.TrimPrefix(err.Error(), "yaml: "), host.ErrInvalid)
	}
	for k, v := range c.ResourceNames {
		if !resourceNameRE().MatchString(v) {
			return c, fmt.Errorf("kubernetes config %s: resourceNames[%q] = %q: want DOMAIN/NAME such as nvidia.com/A100_80GB: %w", path, k, v, host.ErrInvalid)
		}
	}
	return c, nil
}

// override returns the configured name for any of keys, or "".
func (c Config) override(keys ...string) string {
	for _, k := range keys {
		if k == "" {
			continue
		}
		for ck, v := range c.ResourceNames {
			if strings.EqualFold(ck, k) {
				return v
			}
		}
	}
	return ""
}

// pciResource is the resource name of a passthrough GPU or VF: the configured one for its
// "vendor:device", else DOMAIN/PCIName.
func (c Config) pciResource(d *host.Device) string {
	if n := c.override(strings.ToLower(d.VendorID + ":" + d.DeviceID)); n != "" {
		return n
	}
	return Domain(d.VendorID) + "/" + PCIName(d)
}

// typeResource is the resource name of a vGPU type: the configured one for its name or id,
// else DOMAIN/TypeName.
func (c Config) typeResource(vendorID, name, id string) string {
	if n := c.override(name, id); n != "" {
		return n
	}
	return Domain(vendorID) + "/" + TypeName(name, id)
}
