package host

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// errText is err's message, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A devDir, opened or fallen back to full paths, reads what the path-based readers read and
// fails with the same messages: Scan's warnings quote them.
func TestDevDirMatchesPathReaders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("vendor", "0x10de\n")
	write("numa_node", "-1\n")
	write("bad", "zz\n")
	write("nvidia/current_vgpu_type", "1160\n")
	big := strings.Repeat("0x0000000000000000 0x0000000000000000 0x0000000000000000\n", 300) // > 4 KiB
	write("big", big)
	write("empty", "")
	write("group/devices/0000:01:00.0", "")
	write("group/devices/0000:00:01.0", "")
	if err := os.MkdirAll(filepath.Join(dir, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../bus/pci/drivers/nvidia", filepath.Join(dir, "driver")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+strings.Repeat("x", 300), filepath.Join(dir, "longlink")); err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"opened", "paths"} {
		d := Root{}.devDir(dir)
		if mode == "paths" {
			d.close()
			d = Root{}.pathDir(dir)
		} else if d.fd == atCWD {
			t.Fatalf("Root{}.devDir(%s) did not open it", dir)
		}
		t.Run(mode, func(t *testing.T) {
			for _, name := range []string{"vendor", "numa_node", "bad", "missing", "emptydir", "nvidia/current_vgpu_type", "driver/x"} {
				p := filepath.Join(dir, name)
				gs, gerr := d.str(name)
				ws, werr := readAttr(p)
				if gs != ws || errText(gerr) != errText(werr) {
					t.Errorf("str(%s) = %q, %v; readAttr = %q, %v", name, gs, gerr, ws, werr)
				}
				gh, gerr := d.hex(name)
				wh, werr := readHexAttr(p)
				if gh != wh || errText(gerr) != errText(werr) {
					t.Errorf("hex(%s) = %x, %v; readHexAttr = %x, %v", name, gh, gerr, wh, werr)
				}
				gi, gerr := d.int(name)
				wi, werr := readIntAttr(p)
				if gi != wi || errText(gerr) != errText(werr) {
					t.Errorf("int(%s) = %d, %v; readIntAttr = %d, %v", name, gi, gerr, wi, werr)
				}
			}
			for _, name := range []string{"driver", "longlink", "vendor", "missing"} {
				g, gerr := d.linkBase(name)
				w, werr := LinkBase(filepath.Join(dir, name))
				if g != w || errText(gerr) != errText(werr) {
					t.Errorf("linkBase(%s) = %q, %v; LinkBase = %q, %v", name, g, gerr, w, werr)
				}
			}
			for _, name := range []string{"vendor", "big", "empty", "missing", "emptydir"} {
				g, gerr := d.file(name)
				w, werr := os.ReadFile(filepath.Join(dir, name))
				if !bytes.Equal(g, w) || errText(gerr) != errText(werr) {
					t.Errorf("file(%s) = %d bytes, %v; os.ReadFile = %d bytes, %v", name, len(g), gerr, len(w), werr)
				}
			}
			for _, name := range []string{"group/devices", "emptydir", "missing", "vendor"} {
				g, gerr := d.names(name)
				ents, werr := os.ReadDir(filepath.Join(dir, name))
				var w []string
				for _, e := range ents {
					w = append(w, e.Name())
				}
				if !reflect.DeepEqual(g, w) || errText(gerr) != errText(werr) {
					t.Errorf("names(%s) = %q, %v; os.ReadDir = %q, %v", name, g, gerr, w, werr)
				}
			}
			sub := d.sub("group")
			if g, err := sub.names("devices"); err != nil || len(g) != 2 || sub.dir != filepath.Join(dir, "group") {
				t.Errorf("sub(group).names(devices) = %q, %v (dir %s)", g, err, sub.dir)
			}
			sub.close()
		})
		d.close()
	}

	for _, c := range []struct {
		dir      string
		nonEmpty bool
	}{{dir, true}, {filepath.Join(dir, "emptydir"), false}, {filepath.Join(dir, "missing"), false}} {
		d, nonEmpty, err := Root{}.listable(c.dir)
		_, werr := os.ReadDir(c.dir)
		if nonEmpty != c.nonEmpty || errText(err) != errText(werr) {
			t.Errorf("Root{}.listable(%s) = %v, %v; want %v, %v", c.dir, nonEmpty, err, c.nonEmpty, werr)
		}
		d.close()
	}
}
