package clitree

import (
	"bytes"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// `inspect -o json` prints, byte for byte, the inventory host's TestScanGolden pins (written
// by Scan and encoding/json's indenting Encoder before both were made faster, issue 19): on
// the 64-GPU host of bench/scale.sh and on the real-kernel snapshot.
func TestInspectJSONGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		golden string
		root   func(t *testing.T) string
	}{
		{"gpu64", func(t *testing.T) string {
			tr := hosttest.New(t)
			tr.GenerateHost(hosttest.GPUHost64)
			return tr.Dir()
		}},
		{"qemu-q35-iommu-6.1", func(t *testing.T) string {
			return hosttest.Snapshot(t, hosttest.SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz")).Dir()
		}},
	} {
		t.Run(c.golden, func(t *testing.T) {
			t.Parallel()
			dir := c.root(t)
			var out, errOut bytes.Buffer
			if err := runInTest(t, []string{"--host-root", dir, "inspect", "-o", "json"}, &out, &errOut); err != nil {
				t.Fatalf("inspect: %v\n%s", err, errOut.String())
			}
			got := bytes.ReplaceAll(out.Bytes(), []byte(dir), []byte("ROOT"))
			if want := hosttest.ReadScanGolden(t, c.golden); !bytes.Equal(got, want) {
				t.Fatalf("inspect -o json differs from %s %s", hosttest.ScanGoldenPath(t, c.golden), hosttest.FirstDifference(got, want))
			}
		})
	}
}
