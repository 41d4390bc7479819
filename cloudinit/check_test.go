package cloudinit

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestCheckUserData(t *testing.T) {
	ok := []string{"", "#cloud-config\n", "#cloud-config\npackages: [jq]\n", "#cloud-config\r\nruncmd: [ls]\r\n",
		"#!/bin/sh\necho hi\n", "#include\nhttp://x/y\n", "Content-Type: multipart/mixed; boundary=x\n", "## template: jinja\n#cloud-config\n"}
	for _, s := range ok {
		if err := CheckUserData(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	bad := []struct{ in, want string }{
		{"packages: [jq]\n", `starts with "packages: [jq]": cloud-init acts only on`},
		{"#cloud-config\npackages: [jq\n", "not valid YAML: line "},
		{"#cloud-config\n- jq\n", "line 2: want a #cloud-config document, not a list"},
		{"#cloud-config\njust text\n", "not a plain value"},
		{"#cloud-config\na: 1\na: 2\n", "already defined"},
	}
	for _, c := range bad {
		if err := CheckUserData(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v lacks %q", c.in, err, c.want)
		}
	}
}

func TestCheckNetworkConfig(t *testing.T) {
	ok := []string{"", "version: 2\nethernets:\n  eth0: {dhcp4: true}\n", "network:\n  version: 2\n  ethernets: {}\n", "version: 1\nconfig:\n  - {type: physical, name: eth0}\n"}
	for _, s := range ok {
		if err := CheckNetworkConfig(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	bad := []struct{ in, want string }{
		{"ethernets: {}\n", "no version"},
		{"version: 3\n", "version 3: cloud-init knows 1 and 2"},
		{"version: 2\nethernet: {}\n", "version 2 has no key ethernet"},
		{"version: 1\n", "version 1 needs a config: list"},
		{"- a\n", "not a YAML mapping"},
	}
	for _, c := range bad {
		if err := CheckNetworkConfig(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v lacks %q", c.in, err, c.want)
		}
	}
	if err := CheckMetaData("- x\n"); err == nil || !strings.Contains(err.Error(), "want a YAML mapping") {
		t.Errorf("meta-data list: %v", err)
	}
}

// TestAddSSHKeys: keys land in ssh_authorized_keys (appended to ones already there), the rest
// of the document is kept, and the result is still #cloud-config.
func TestAddSSHKeys(t *testing.T) {
	k1, k2 := "ssh-ed25519 AAAAC3Nza one@a", "ssh-rsa AAAAB3Nza two@b"
	cases := []struct{ in, keysAt string }{
		{"", ""},
		{"#cloud-config\n", ""},
		{"#cloud-config\npackages: [jq]\n# a comment\n", "packages"},
		{"#cloud-config\nssh_authorized_keys:\n  - ssh-ed25519 AAAAold zero@c\n", "old"},
	}
	for _, c := range cases {
		out, err := AddSSHKeys(c.in, []string{k1, k2})
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if !strings.HasPrefix(out, "#cloud-config\n") {
			t.Errorf("%q -> %q: lost the #cloud-config line", c.in, out)
		}
		var doc struct {
			Keys     []string `yaml:"ssh_authorized_keys"`
			Packages []string `yaml:"packages"`
		}
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%q -> %q: %v", c.in, out, err)
		}
		want := []string{k1, k2}
		if c.keysAt == "old" {
			want = append([]string{"ssh-ed25519 AAAAold zero@c"}, want...)
		}
		if strings.Join(doc.Keys, "|") != strings.Join(want, "|") {
			t.Errorf("%q -> keys %q, want %q", c.in, doc.Keys, want)
		}
		if c.keysAt == "packages" && (len(doc.Packages) != 1 || !strings.Contains(out, "# a comment")) {
			t.Errorf("%q -> %q: lost the rest", c.in, out)
		}
	}
	if _, err := AddSSHKeys("#!/bin/sh\n", []string{k1}); err == nil {
		t.Error("keys into a script: no error")
	}
}

func TestParseKeys(t *testing.T) {
	keys, err := ParseKeys([]byte("# mine\nssh-ed25519 AAAAC3 me@x\n\necdsa-sha2-nistp256 AAAAE2 you@y\n"), "k.pub")
	if err != nil || len(keys) != 2 {
		t.Fatalf("%q %v", keys, err)
	}
	for in, want := range map[string]string{
		"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n": "k:1: a private key: give the public one (.pub)",
		"ssh-ed25519 AAAA x\nhello\n":                 "k:2: not an OpenSSH public key",
		"# nothing\n":                                 "k: no public key in it",
	} {
		if _, err := ParseKeys([]byte(in), "k"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v lacks %q", in, err, want)
		}
	}
}
