package host

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// devDir.file and fileIn read files of every size whole, around the page they read into
// first: shorter than it (the bytes are the page's), exactly a page (the first read fills
// it and the rest goes on in memory of its own) and longer; and a parse from a stack page
// allocates nothing for the bytes read (Scan reads uevent and resource that way).
func TestDevDirFileSizes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []int{0, 1, 741, 4095, 4096, 4097, 8192, 10000} {
		want := bytes.Repeat([]byte("0123456789abcdef\n"), n/17+1)[:n]
		name := filepath.Join(dir, "f")
		if err := os.WriteFile(name, want, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, dd := range []devDir{Root{}.pathDir(dir), Root{}.devDir(dir)} {
			got, err := dd.file("f")
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("file of %d bytes (fd %d) = %d bytes, %v", n, dd.fd, len(got), err)
			}
			var page [4096]byte
			got, err = dd.fileIn("f", "", &page)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("fileIn of %d bytes (fd %d) = %d bytes, %v", n, dd.fd, len(got), err)
			}
			dd.close()
		}
	}
	if _, err := (Root{}).pathDir(dir).file("missing"); !os.IsNotExist(err) || err.Error() != "open "+filepath.Join(dir, "missing")+": no such file or directory" {
		t.Fatalf("missing file: %v", err)
	}
}

// readIdentity and readBARs parse from a page on their stack: the one allocation each is what
// they return (the driver's name; the BARs), never a copy of the file.
func TestStackPageReadsAllocate(t *testing.T) {
	dir := t.TempDir()
	uevent := "DRIVER=nvidia\nPCI_CLASS=30200\nPCI_ID=10DE:2235\nPCI_SUBSYS_ID=10DE:145A\nPCI_SLOT_NAME=0000:41:00.0\n"
	resource := "0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200\n" + string(bytes.Repeat([]byte("0x0000000000000000 0x0000000000000000 0x0000000000000000\n"), 12))
	for name, content := range map[string]string{"uevent": uevent, "resource": resource} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dd := Root{}.devDir(dir)
	defer dd.close()
	if id := readIdentity(dd, "uevent", ""); id.driver != "nvidia" || id.class != 0x30200 || id.vendor != 0x10de || id.subDevice != 0x145a {
		t.Fatalf("identity = %+v", id)
	}
	if n := testing.AllocsPerRun(20, func() { readIdentity(dd, "uevent", "") }); n > 1 {
		t.Errorf("readIdentity: %v allocations per read, want 1 (the driver name)", n)
	}
	// As Scan's first pass reads it: "ADDR", "uevent" from the parent, joined on the stack.
	parent := Root{}.devDir(filepath.Dir(dir))
	defer parent.close()
	if id := readIdentity(parent, filepath.Base(dir), "uevent"); id.driver != "nvidia" || id.class != 0x30200 {
		t.Fatalf("identity from the parent = %+v", id)
	}
	if n := testing.AllocsPerRun(20, func() { readIdentity(parent, filepath.Base(dir), "uevent") }); n > 1 {
		t.Errorf("readIdentity from the parent: %v allocations per read, want 1 (the driver name)", n)
	}
	if bars, err := readBARs(dd); err != nil || len(bars) != 1 || bars[0].Size != 16<<20 {
		t.Fatalf("BARs = %+v, %v", bars, err)
	}
	if n := testing.AllocsPerRun(20, func() { readBARs(dd) }); n > 1 {
		t.Errorf("readBARs: %v allocations per read, want 1 (the BARs)", n)
	}
}

// atoiBytes and baseOf stand in for strconv.ParseInt(s, 0, 64) and filepath.Base on what
// sysfs shows, without a string: each agrees with what it replaces, or (atoiBytes) declines
// and leaves the text to it.
func TestAtoiBytesAndBaseOfAgree(t *testing.T) {
	for _, s := range []string{"0", "-1", "1", "16", "-0", "007", "0x10", "+5", "", "-", "1_000", "12a",
		"999999999999999999", "9223372036854775807", "-9223372036854775808", "99999999999999999999", " 1"} {
		want, werr := strconv.ParseInt(s, 0, 64)
		got, ok := atoiBytes([]byte(s))
		if ok && (werr != nil || got != want) {
			t.Errorf("atoiBytes(%q) = %d, ParseInt = %d, %v", s, got, want, werr)
		}
		if !ok && werr == nil && len(s) <= 18 && s != "" && s[0] != '0' && s[0] != '+' && !strings.ContainsAny(s, "_xob") && s != "-0" {
			t.Errorf("atoiBytes(%q) declined a plain decimal", s)
		}
	}
	for _, s := range []string{"../../../bus/pci/drivers/nvidia", "../../../kernel/iommu_groups/27", "x", "", "/", "//", "a/", "a//", "/a", "../0000:41:00.0"} {
		if got, want := baseOf([]byte(s)), filepath.Base(s); got != want {
			t.Errorf("baseOf(%q) = %q, filepath.Base = %q", s, got, want)
		}
	}
	var buf [16]byte
	b := append(buf[:0], "-1"...)
	if n := testing.AllocsPerRun(20, func() { atoiBytes(b) }); n != 0 {
		t.Errorf("atoiBytes: %v allocations, want 0", n)
	}
}
