package hosttest

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// ScanGoldenPath is the path of the pinned inventory NAME,
// host/testdata/scan-golden/NAME.json.gz: Scan's indented JSON (what `inspect -o json`
// prints) on one of the hosts of host's TestScanGolden, the root directory written ROOT.
func ScanGoldenPath(tb testing.TB, name string) string {
	tb.Helper()
	return filepath.Join(repoRoot(tb), "host", "testdata", "scan-golden", name+".json.gz")
}

// ReadScanGolden returns the pinned inventory NAME, decompressed.
func ReadScanGolden(tb testing.TB, name string) []byte {
	tb.Helper()
	f, err := os.Open(ScanGoldenPath(tb, name))
	if err != nil {
		tb.Fatalf("%v (host's TestScanGolden writes it with -update-scan-golden)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", f.Name(), err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatalf("%s: %v", f.Name(), err)
	}
	return b
}

// WriteScanGolden pins data as the inventory NAME.
func WriteScanGolden(tb testing.TB, name string, data []byte) {
	tb.Helper()
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		tb.Fatal(err)
	}
	zw.Write(data)
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	p := ScanGoldenPath(tb, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, z.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// FirstDifference describes where got and want first differ: the byte offset, the sizes and
// the text around it, for a failure message.
func FirstDifference(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("at byte %d (line %d) of %d (want %d):\n got: %q\nwant: %q", i, bytes.Count(want[:i], []byte("\n"))+1,
		len(got), len(want), got[max(0, i-80):min(len(got), i+80)], want[max(0, i-80):min(len(want), i+80)])
}
