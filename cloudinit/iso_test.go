package cloudinit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func need(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs %s (genisoimage/util-linux)", tool)
		}
		t.Skipf("needs %s", tool)
	}
}

// TestSeedReadByIsoinfo checks the image with genisoimage's isoinfo: the label is cidata and
// the Joliet tree holds the three files under their cloud-init names with their content.
func TestSeedReadByIsoinfo(t *testing.T) {
	need(t, "isoinfo")
	s := Seed{
		UserData:      "#cloud-config\npassword: x\n" + strings.Repeat("# pad\n", 600), // > 1 sector
		MetaData:      "instance-id: vgpuhost-test\nlocal-hostname: t\n",
		NetworkConfig: "version: 2\n",
	}
	img, err := s.ISO()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(p, img, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("isoinfo", "-d", "-i", p).CombinedOutput()
	if err != nil {
		t.Fatalf("isoinfo -d: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Volume id: cidata") || !strings.Contains(string(out), "Joliet with UCS level 3 found") {
		t.Fatalf("isoinfo -d:\n%s", out)
	}
	list, err := exec.Command("isoinfo", "-J", "-f", "-i", p).CombinedOutput()
	if err != nil {
		t.Fatalf("isoinfo -f: %v\n%s", err, list)
	}
	if got := strings.Fields(string(list)); strings.Join(got, " ") != "/meta-data /network-config /user-data" {
		t.Fatalf("files = %q", got)
	}
	for name, want := range s.Files() {
		got, err := exec.Command("isoinfo", "-J", "-i", p, "-x", "/"+name).Output()
		if err != nil {
			t.Fatalf("isoinfo -x %s: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: got %d bytes, want %d", name, len(got), len(want))
		}
	}
	if _, err := exec.LookPath("blkid"); err == nil {
		out, _ := exec.Command("blkid", "-p", "-o", "export", p).CombinedOutput()
		if !strings.Contains(string(out), "LABEL=cidata") || !strings.Contains(string(out), "TYPE=iso9660") {
			t.Fatalf("blkid -p:\n%s", out)
		}
	}
}

func TestSeedDeterministicAndOptionalNetwork(t *testing.T) {
	a, _ := Seed{UserData: "u", MetaData: "m"}.ISO()
	b, _ := Seed{UserData: "u", MetaData: "m"}.ISO()
	if !bytes.Equal(a, b) {
		t.Fatal("same seed, different bytes")
	}
	if bytes.Contains(a, ucs2("network-config")) {
		t.Fatal("empty network-config was written")
	}
	c, _ := Seed{UserData: "u2", MetaData: "m"}.ISO()
	if bytes.Equal(a, c) {
		t.Fatal("different user-data, same bytes")
	}
	if _, err := WriteISO("cidata", map[string][]byte{"a/b": nil}); err == nil {
		t.Fatal("a name with / was accepted")
	}
}
