package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestLogWriter: each write is passed on and reported with its device, path, the value it
// replaced and the new value; a write-only attribute (nothing to read) reports old "".
func TestLogWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dev := filepath.Join(dir, "sys", "bus", "pci", "devices", "0000:01:00.0")
	os.MkdirAll(dev, 0o755)
	os.WriteFile(filepath.Join(dev, "driver_override"), []byte("(null)\n"), 0o644)
	rec := &Recorder{}
	var got []LoggedWrite
	w := LogWriter{W: rec, Log: func(c LoggedWrite) { got = append(got, c) }}
	ctx := context.Background()
	if err := w.Write(ctx, filepath.Join(dev, "driver_override"), "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	mdevCreate := filepath.Join(dir, "sys", "class", "mdev_bus", "mbochs", "mdev_supported_types", "mbochs-small", "create")
	if err := w.Write(ctx, mdevCreate, "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001\n"); err != nil {
		t.Fatal(err)
	}
	if len(rec.Writes()) != 2 || len(got) != 2 {
		t.Fatalf("writes %v, reported %v", rec.Writes(), got)
	}
	if c := got[0]; c.Device != "0000:01:00.0" || c.Old != "(null)" || c.New != "vfio-pci" || c.Path != filepath.Join(dev, "driver_override") {
		t.Errorf("driver_override: %+v", c)
	}
	if c := got[1]; c.Device != "" || c.Old != "" || c.New != "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001" {
		t.Errorf("mdev create: %+v", c)
	}
}
