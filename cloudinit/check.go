package cloudinit

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
)

// userDataHeaders are the first lines cloud-init recognises besides #cloud-config and a #!
// script (cloud-init's "User data formats"); their bodies are passed through unchecked.
var userDataHeaders = []string{"#include", "#cloud-boothook", "#cloud-config-archive", "#part-handler", "## template: jinja", "Content-Type:"}

// CheckUserData checks that s is user-data cloud-init will act on: a #cloud-config YAML
// mapping, a script starting with #!, or another format by its header. Anything else cloud-init
// silently ignores, so the guest would boot unconfigured. Empty is fine (the seed gets an empty
// #cloud-config).
func CheckUserData(s string) error {
	if s == "" {
		return nil
	}
	first, _, _ := strings.Cut(s, "\n")
	first = strings.TrimRight(first, "\r")
	switch {
	case strings.TrimSpace(first) == "#cloud-config":
		return checkMapping(s, "a #cloud-config document")
	case strings.HasPrefix(first, "#!"):
		return nil
	}
	for _, h := range userDataHeaders {
		if strings.HasPrefix(first, h) {
			return nil
		}
	}
	return fmt.Errorf("starts with %q: cloud-init acts only on a first line of #cloud-config (YAML), #! (a script) or %s, and would ignore this", host.Clip(first, 40), strings.Join(userDataHeaders, ", "))
}

// CheckMetaData checks that s is a YAML mapping (instance-id, local-hostname, …).
func CheckMetaData(s string) error {
	if s == "" {
		return nil
	}
	return checkMapping(s, "a YAML mapping (instance-id: …)")
}

// networkV2Keys are the keys of a version 2 (netplan-style) network config.
var networkV2Keys = []string{"version", "renderer", "ethernets", "bonds", "bridges", "vlans", "wifis", "tunnels", "vrfs", "modems"}

// CheckNetworkConfig checks that s is a cloud-init network config: a YAML mapping with version
// 2 (netplan-style: ethernets, bonds, bridges, vlans, …) or version 1 (a config list), at the
// top or under network:.
func CheckNetworkConfig(s string) error {
	if s == "" {
		return nil
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
		return fmt.Errorf("not a YAML mapping: %w", yamlErr(err))
	}
	if n, ok := doc["network"].(map[string]any); ok && len(doc) == 1 {
		doc = n
	}
	switch v := doc["version"]; v {
	case 2:
		var unknown []string
		for k := range doc {
			if !slices.Contains(networkV2Keys, k) {
				unknown = append(unknown, k)
			}
		}
		sort.Strings(unknown)
		if len(unknown) > 0 {
			return fmt.Errorf("version 2 has no key %s (it has %s)", strings.Join(unknown, ", "), strings.Join(networkV2Keys, ", "))
		}
	case 1:
		if _, ok := doc["config"].([]any); !ok {
			return errors.New("version 1 needs a config: list")
		}
	case nil:
		return errors.New("no version: say version: 2 (ethernets, bonds, bridges, vlans) or version: 1")
	default:
		return fmt.Errorf("version %v: cloud-init knows 1 and 2", v)
	}
	return nil
}

// checkMapping parses s as YAML and requires a mapping (or an empty document).
func checkMapping(s, want string) error {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil {
		return fmt.Errorf("not valid YAML: %w", yamlErr(err))
	}
	if len(n.Content) == 0 {
		return nil
	}
	if n.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want %s, not a %s", n.Content[0].Line, want, kindName(n.Content[0].Kind))
	}
	// A key given twice (two runcmd: blocks) is legal to cloud-init's YAML reader, which keeps
	// the last one silently; decoding into a map says so.
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		return fmt.Errorf("%w (cloud-init would keep only the last)", yamlErr(err))
	}
	return nil
}

// AddSSHKeys returns user-data with keys appended to its ssh_authorized_keys (created when
// absent). userData must be empty or #cloud-config.
func AddSSHKeys(userData string, keys []string) (string, error) {
	if len(keys) == 0 {
		return userData, nil
	}
	if strings.TrimSpace(userData) == "" {
		userData = "#cloud-config\n"
	}
	first, _, _ := strings.Cut(userData, "\n")
	if strings.TrimSpace(strings.TrimRight(first, "\r")) != "#cloud-config" {
		return "", errors.New("sshAuthorizedKeys needs userData to be #cloud-config (or empty)")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(userData), &doc); err != nil {
		return "", fmt.Errorf("userData: %w", yamlErr(err))
	}
	if len(doc.Content) == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return "", errors.New("userData: #cloud-config is not a mapping")
	}
	var seq *yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "ssh_authorized_keys" {
			seq = m.Content[i+1]
		}
	}
	if seq == nil {
		seq = &yaml.Node{Kind: yaml.SequenceNode}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "ssh_authorized_keys"}, seq)
	}
	if seq.Kind != yaml.SequenceNode {
		return "", errors.New("userData: ssh_authorized_keys is not a list")
	}
	for _, k := range keys {
		seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k})
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", err
	}
	out := b.String()
	if !strings.HasPrefix(out, "#cloud-config") {
		out = "#cloud-config\n" + out
	}
	return out, nil
}

// keyTypes are the OpenSSH public key types an authorized_keys line may start with.
var keyTypes = []string{"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
	"sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com", "ssh-dss"}

// IsPublicKey reports whether s looks like one OpenSSH public key line ("ssh-ed25519 AAAA… comment").
func IsPublicKey(s string) bool {
	f := strings.Fields(s)
	return len(f) >= 2 && slices.Contains(keyTypes, f[0]) && strings.HasPrefix(f[1], "AAAA")
}

// ParseKeys returns the public keys of an authorized_keys-style file (one per line; blank
// lines and # comments skipped). A line that is not a public key (a private key given by
// mistake) is an error naming the line; so is a file with no key.
func ParseKeys(data []byte, name string) ([]string, error) {
	var keys []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !IsPublicKey(line) {
			if strings.Contains(line, "PRIVATE KEY") {
				return nil, fmt.Errorf("%s:%d: a private key: give the public one (.pub)", name, i+1)
			}
			return nil, fmt.Errorf("%s:%d: not an OpenSSH public key (want %s AAAA…)", name, i+1, strings.Join(keyTypes[:3], ", "))
		}
		keys = append(keys, line)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no public key in it", name)
	}
	return keys, nil
}

func yamlErr(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "plain value"
	case yaml.AliasNode:
		return "alias"
	}
	return "mapping"
}
