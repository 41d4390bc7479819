package kube

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
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
var vendorDomains = lazy.Value[map[string]string]{New: func() map[string]string {
	return map[string]string{
		"10de": "nvidia.com",
		"8086": "intel.com",
		"1002": "amd.com",
	}
}}

// DefaultDomain prefixes resource names of vendors without an entry in vendorDomains.
const DefaultDomain = "vgpu-host.io"

// Domain returns the resource-name domain of a PCI vendor id ("10de" → "nvidia.com").
func Domain(vendorID string) string {
	if d, ok := vendorDomains.Get()[strings.ToLower(vendorID)]; ok {
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
// Unlike NVIDIA's plugin, the result is always a name the kubelet accepts (BoundName): "_" at
// either end is trimmed ("GA104 [RTX A4500 Embedded GPU ]" → "GA104_RTX_A4500_EMBEDDED_GPU",
// not the "..._GPU_" the kubelet refuses), and a name over 63 characters is cut and given a
// hash of the whole name. Without a usable pci.ids name it is PCI_<VENDOR>_<DEVICE>
// ("PCI_10DE_20B5").
func PCIName(d *host.Device) string {
	n := strings.ToUpper(strings.TrimSpace(d.DeviceName))
	n = strings.NewReplacer("/", "_", ".", "_").Replace(n)
	n = underscoreSpaces(n)
	n = BoundName(keep(n, func(r rune) bool { return isAlnum(r) || r == '_' }))
	if n == "" {
		return strings.ToUpper("PCI_" + d.VendorID + "_" + d.DeviceID)
	}
	return n
}

// TypeName is the name part of a vGPU type's resource: the type's name with runs of spaces
// as "_" (case and "-" kept), as NVIDIA's plugin and KubeVirt's documentation spell it, and
// anything outside [A-Za-z0-9_.-] dropped, bounded by BoundName:
//
//	"GRID A100-4C" → "GRID_A100-4C"     "NVIDIA L40S-8Q" → "NVIDIA_L40S-8Q"
//
// A type without a (usable) name uses its id ("mbochs-small").
func TypeName(name, id string) string {
	clean := func(s string) string {
		s = underscoreSpaces(strings.TrimSpace(s))
		return BoundName(keep(s, func(r rune) bool { return isAlnum(r) || r == '_' || r == '.' || r == '-' }))
	}
	if n := clean(name); n != "" {
		return n
	}
	return clean(id)
}

// MaxNameLen is the longest name part (after the "/") of a resource name: the kubelet
// registers only extended resource names (v1helper.IsExtendedResourceName), whose name part
// is a qualified name (apimachinery validation.IsQualifiedName), at most 63 characters.
const MaxNameLen = 63

// hashLen is how many hex digits of SHA-256 a cut name ends with.
const hashLen = 8

// BoundName makes n, already restricted to [-A-Za-z0-9_.], a valid qualified name part: it
// trims what is not a letter or digit from both ends and, when the rest is longer than
// MaxNameLen, cuts it and appends "_" and the first 8 hex digits of the SHA-256 of the whole
// trimmed name, so two long names that share a prefix stay two resources and the same name
// always gives the same result. It returns "" when nothing is left.
//
//	pci.ids 1002:6900 "Topaz XT [Radeon R7 M260/M265 / M340/M360 / M440/M445 / 530/535 / 620/625 Mobile]"
//	→ "TOPAZ_XT_RADEON_R7_M260_M265___M340_M360___M440_M445_a40f92be" (79 characters cut to 62)
func BoundName(n string) string {
	n = strings.TrimFunc(n, func(r rune) bool { return !isAlnum(r) })
	if len(n) <= MaxNameLen {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	head := strings.TrimRightFunc(n[:MaxNameLen-1-hashLen], func(r rune) bool { return !isAlnum(r) })
	return head + "_" + hex.EncodeToString(sum[:])[:hashLen]
}

// ValidResourceName reports why name is not an extended resource name the kubelet registers,
// or nil. It is the kubelet's check (k8s.io/kubernetes pkg/apis/core/v1/helper
// IsExtendedResourceName, applied by the device manager's Register and by the DRA's
// extended-resource mapping) written out: a "/" and not in the kubernetes.io namespace, not
// starting "requests.", and "requests."+name a qualified name: a DNS subdomain prefix of at
// most 253 characters, a name part of at most 63 characters, alphanumeric at both ends and
// [-A-Za-z0-9_.] inside. kube's tests hold it to the upstream functions.
func ValidResourceName(name string) error {
	prefix, part, ok := strings.Cut(name, "/")
	switch {
	case !ok || strings.Contains(name, "kubernetes.io/"):
		return fmt.Errorf("resource name %q: want DOMAIN/NAME outside kubernetes.io such as nvidia.com/A100_80GB", name)
	case strings.HasPrefix(name, "requests."):
		return fmt.Errorf("resource name %q: must not start with \"requests.\"", name)
	case len("requests."+prefix) > 253 || !dnsSubdomainRE.Get().MatchString("requests."+prefix):
		return fmt.Errorf("resource name %q: domain %q is not a lower-case DNS subdomain", name, prefix)
	case len(part) > MaxNameLen:
		return fmt.Errorf("resource name %q: name part is %d characters, at most %d allowed", name, len(part), MaxNameLen)
	case !qualifiedPartRE.Get().MatchString(part):
		return fmt.Errorf("resource name %q: name part %q must be letters, digits, '-', '_' or '.', with a letter or digit at both ends", name, part)
	}
	return nil
}

// The expressions of apimachinery's validation (dns1123SubdomainFmt, qualifiedNameFmt),
// compiled on first use: vgpu-host's start-up must not pay for them.
var (
	dnsSubdomainRE  = lazy.Regexp{Expr: `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`}
	qualifiedPartRE = lazy.Regexp{Expr: `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`}
)

// Config is the plugin's configuration file (YAML), docs/kubevirt.md "Configuration":
//
//	resourceNames:
//	  "10de:20b5": nvidia.com/A100_80GB     # a passthrough model, by vendor:device
//	  "GRID A100-4C": nvidia.com/A100-4C    # a vGPU type, by name or type id (nvidia-471, 1160)
//	includeEmulated: false                  # true: also emulated displays, sample mdev types
type Config struct {
	// ResourceNames overrides generated resource names. Keys are "vendor:device" (lower-case
	// hex) for passthrough GPUs and VFs, or a vGPU type's name or id.
	ResourceNames map[string]string `yaml:"resourceNames" json:"resourceNames,omitempty"`
	// IncludeEmulated advertises what is not a real GPU too: emulated display devices
	// (EmulatedDisplay: QEMU's bochs VGA, virtio-gpu, QXL, Cirrus, VMware SVGA) and the mdev
	// types of parents that are not real GPUs (the kernel's mbochs, mdpy and mtty samples).
	// For labs without GPUs; off, they are not resources at all.
	IncludeEmulated bool `yaml:"includeEmulated" json:"includeEmulated,omitempty"`
	// Recorded are the names vendor-VFIO types were first given, by type number (LoadNames,
	// NamesFile): not configured, but kept so a resource keeps its name when its GPU is full.
	Recorded map[string]RecordedType `yaml:"-" json:"-"`
}

// DefaultConfigPath is where the configuration lives under the host root.
const DefaultConfigPath = "etc/vgpu-host/kubernetes.yaml"

// LoadConfig reads a configuration file strictly. A missing file at the default path is an
// empty configuration; set required for a path the user named.
func LoadConfig(path string, required bool) (Config, error) {
	b, err := ReadConfig(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(path, b)
}

// ReadConfig reads the resource-name overrides file at path, for ParseConfig.
func ReadConfig(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read kubernetes config: %w", err)
	}
	return b, nil
}

// ParseConfig decodes (strictly) and checks the resource-name overrides of the file named
// path, whose content is b: LoadConfig's parser, for a caller that sends the file's content.
func ParseConfig(path string, b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("kubernetes config %s: %s: %w", path, strings.TrimPrefix(err.Error(), "yaml: "), host.ErrInvalid)
	}
	for k, v := range c.ResourceNames {
		if err := ValidResourceName(v); err != nil {
			return c, fmt.Errorf("kubernetes config %s: resourceNames[%q]: %w: %w", path, k, err, host.ErrInvalid)
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
