package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// A read that blocks (a sysfs attribute waiting on its device; here a FIFO whose writer never
// writes) is given up after the timeout instead of hanging the snapshot.
func TestReadBoundedGivesUpOnABlockingRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	w, err := os.OpenFile(p, os.O_RDWR, 0) // holds the FIFO open without writing
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	_, err = readBounded(context.Background(), p, 100*time.Millisecond)
	if !errors.Is(err, errSlow) || time.Since(start) > 2*time.Second {
		t.Fatalf("read of a blocking file: %v after %s, want %v after 100ms", err, time.Since(start), errSlow)
	}
}

// tree builds a small sysfs under a temporary root.
func tree(t *testing.T) host.Root {
	t.Helper()
	dir := t.TempDir()
	dev := filepath.Join(dir, "sys/devices/pci0000:00/0000:00:01.0")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dev, "nvme/nvme0"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "sys/bus/pci/devices"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "proc"), 0o755))
	must(os.WriteFile(filepath.Join(dev, "vendor"), []byte("0x10de\n"), 0o444))
	must(os.WriteFile(filepath.Join(dev, "remove"), nil, 0o200))
	must(os.WriteFile(filepath.Join(dev, "resource0"), []byte("bar"), 0o600))
	must(os.WriteFile(filepath.Join(dev, "rom"), []byte("rom"), 0o600))
	must(os.WriteFile(filepath.Join(dev, "huge"), make([]byte, MaxFile+1), 0o444))
	must(os.WriteFile(filepath.Join(dev, "nvme/nvme0/serial"), []byte("S4EWNX0R123456\n"), 0o444))
	must(os.Symlink("../../../devices/pci0000:00/0000:00:01.0", filepath.Join(dir, "sys/bus/pci/devices/0000:00:01.0")))
	must(os.WriteFile(filepath.Join(dir, "proc/cmdline"), []byte("BOOT_IMAGE=/vmlinuz root=UUID=3f1c2a9e-8d4b-4c1e-9a7f-0b2c3d4e5f60 ro intel_iommu=on\n"), 0o444))
	r, err := host.NewRoot(dir)
	must(err)
	return r
}

func TestWrite(t *testing.T) {
	r := tree(t)
	var buf bytes.Buffer
	rep, err := Write(context.Background(), r, &buf, Options{Extra: map[string][]byte{"nvml-facts.json": []byte("{}")}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	links := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
		if h.Typeflag == tar.TypeSymlink {
			links[h.Name] = h.Linkname
		}
	}
	dev := "sys/devices/pci0000:00/0000:00:01.0/"
	want := map[string]string{
		dev + "vendor":            "0x10de\n",
		dev + "nvme/nvme0/serial": "00000000000000\n",
		"proc/cmdline":            "BOOT_IMAGE=/vmlinuz root=UUID=00000000-0000-0000-0000-000000000000 ro intel_iommu=on\n",
		"nvml-facts.json":         "{}",
	}
	for name, content := range want {
		if g, ok := got[name]; !ok || g != content {
			t.Errorf("%s: %q (present %v), want %q", name, g, ok, content)
		}
	}
	for _, name := range []string{dev + "remove", dev + "resource0", dev + "rom", dev + "huge"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s is in the snapshot", name)
		}
	}
	if l := links["sys/bus/pci/devices/0000:00:01.0"]; l != "../../../devices/pci0000:00/0000:00:01.0" {
		t.Errorf("PCI device link: %q", l)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Path != dev+"huge" {
		t.Errorf("skipped %+v, want the huge file", rep.Skipped)
	}
}

// The Device Serial Number capability's serial is zeroed; the rest of config space is kept.
func TestScrubConfigDSN(t *testing.T) {
	cfg := make([]byte, 4096)
	cfg[0], cfg[1] = 0xde, 0x10
	binary.LittleEndian.PutUint32(cfg[0x100:], 0x0001|1<<16|0x140<<20)
	binary.LittleEndian.PutUint32(cfg[0x140:], pciExtCapDSN|1<<16)
	copy(cfg[0x144:], []byte{1, 2, 3, 4, 5, 6, 7, 8})
	out := Scrub("sys/devices/pci0000:00/0000:00:01.0/config", cfg)
	if !bytes.Equal(out[0x144:0x14c], make([]byte, 8)) {
		t.Errorf("DSN not zeroed: % x", out[0x144:0x14c])
	}
	if out[0] != 0xde || binary.LittleEndian.Uint32(out[0x140:]) != pciExtCapDSN|1<<16 {
		t.Error("config space changed beyond the serial")
	}
	if short := Scrub("sys/devices/pci0000:00/0000:00:01.0/config", cfg[:64]); !bytes.Equal(short, cfg[:64]) {
		t.Error("64-byte config space changed")
	}
}

// TestErrLargeSaysMaxFile: errLarge's text, written out, follows MaxFile.
func TestErrLargeSaysMaxFile(t *testing.T) {
	if want := fmt.Sprintf("larger than %d KiB", MaxFile>>10); errLarge.Error() != want {
		t.Fatalf("errLarge = %q, want %q", errLarge, want)
	}
}

// TestWriteStaysInRoot: a snapshot of a fake root whose sys/class and sys/module are links to a
// decoy outside it (as sys/class -> /sys/class would be: the trees sys/class/net and
// sys/module/vfio* lie beyond them), whose proc/cmdline is one with "..", and whose
// sys/devices/pci0000:01 is one, leaves each of them out, saying why, instead of copying the
// decoy (this machine's files, for links to /sys or /proc) under the root's name. Before, the
// walks of sys/class/net and sys/module/vfio_pci copied the decoy's files. The links inside the
// root are copied as before.
func TestWriteStaysInRoot(t *testing.T) {
	r := tree(t)
	decoy := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(decoy, "class", "net", "eth0"), 0o755))
	must(os.WriteFile(filepath.Join(decoy, "class", "net", "eth0", "address"), []byte("decoy\n"), 0o444))
	must(os.MkdirAll(filepath.Join(decoy, "module", "vfio_pci", "parameters"), 0o755))
	must(os.WriteFile(filepath.Join(decoy, "module", "vfio_pci", "parameters", "ids"), []byte("decoy\n"), 0o444))
	must(os.MkdirAll(filepath.Join(decoy, "pci", "0000:01:00.0"), 0o755))
	must(os.WriteFile(filepath.Join(decoy, "pci", "0000:01:00.0", "vendor"), []byte("decoy\n"), 0o444))
	must(os.WriteFile(filepath.Join(decoy, "cmdline"), []byte("decoy\n"), 0o444))
	must(os.Symlink(filepath.Join(decoy, "class"), r.Sys("class")))
	must(os.Symlink(filepath.Join(decoy, "module"), r.Sys("module")))
	must(os.Symlink(filepath.Join(decoy, "pci"), r.Sys("devices", "pci0000:01")))
	must(os.Remove(r.Proc("cmdline")))
	rel, err := filepath.Rel(r.Proc(), filepath.Join(decoy, "cmdline"))
	must(err)
	must(os.Symlink(rel, r.Proc("cmdline")))
	var buf bytes.Buffer
	rep, err := Write(context.Background(), r, &buf, Options{})
	must(err)
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		b, _ := io.ReadAll(tr)
		names = append(names, h.Name)
		if strings.Contains(string(b), "decoy") {
			t.Errorf("%s holds the decoy's %q", h.Name, b)
		}
	}
	if !slices.Contains(names, "sys/devices/pci0000:00/0000:00:01.0/vendor") {
		t.Errorf("the in-root function is missing: %v", names)
	}
	skipped := map[string]bool{}
	for _, s := range rep.Skipped {
		skipped[s.Path] = strings.Contains(s.Why, "outside the host root")
	}
	for _, p := range []string{"sys/class/net", "sys/module/vfio_pci", "sys/devices/pci0000:01"} {
		if !skipped[p] {
			t.Errorf("%s not skipped as leading out of the root: %+v", p, rep.Skipped)
		}
	}
}
