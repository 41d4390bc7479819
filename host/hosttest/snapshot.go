package hosttest

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

// SharedFixture returns the path of a real-kernel snapshot in ../shared/fixtures beside the
// repository (where CI puts shared/), e.g. SharedFixture(t, "qemu-q35-iommu-6.1.tar.gz").
// When it is missing the test skips locally and fails in CI (CI set in the environment).
func SharedFixture(tb testing.TB, name string) string {
	tb.Helper()
	return requireFile(tb, filepath.Join(repoRoot(tb), "..", "shared", "fixtures", name))
}

// Capture returns the path of a file of a real machine's capture, NAME relative to where
// captures live: the repository's testdata/ (the H100 host, testdata/nvidia-h100) or
// ../shared/fixtures/ (the H200 host and the real-kernel snapshot). A missing file fails the
// test in CI and skips it elsewhere, as SharedFixture does.
func Capture(tb testing.TB, name string) string {
	tb.Helper()
	if p := filepath.Join(repoRoot(tb), "testdata", name); fileExists(p) {
		return p
	}
	return SharedFixture(tb, name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// RepoFile returns the path of a file relative to the repository root, or "" when it does not
// exist (for optional snapshots such as host/testdata/lab-snapshot.tar.gz).
func RepoFile(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(repoRoot(tb), rel)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

func requireFile(tb testing.TB, p string) string {
	tb.Helper()
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("CI must run this test, but the fixture is missing: %v", err)
		}
		tb.Skipf("fixture missing (skipped outside CI): %v", err)
	}
	return p
}

// repoRoot walks up from the working directory (a package directory under go test) to go.mod.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			tb.Fatalf("hosttest: no go.mod above %s", dir)
		}
	}
}

// Snapshot unpacks a sysfs snapshot (a .tar.gz of sys/, proc/, dev/ with symlinks kept) into
// a fresh t.TempDir() and returns it as a host root.
func Snapshot(tb testing.TB, tarball string) host.Root {
	tb.Helper()
	dir := tb.TempDir()
	if err := unpack(tarball, dir); err != nil {
		tb.Fatalf("hosttest: unpack %s: %v", tarball, err)
	}
	r, err := host.NewRoot(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// RealGPUPCIIDs is the part of Debian 12's pci.ids (2023) that names the captured real GPUs: it
// lists the H100 SXM5 (10de:2330) and not the H200 (10de:2335), as the pci.ids the H200 host
// itself had. Tests that name devices write it into a snapshot (RealGPUSnapshot), so that they
// do not depend on the pci.ids of the machine they run on.
const RealGPUPCIIDs = "# pci.ids, Debian 12\n10de  NVIDIA Corporation\n\t2330  GH100[H100 SXM5 80GB]\n"

// RealGPUSnapshot is Snapshot of a real GPU host's capture (Capture's NAME, e.g.
// "nvidia-h200/sysfs-snapshot.tar.gz") with RealGPUPCIIDs as its usr/share/misc/pci.ids.
func RealGPUSnapshot(tb testing.TB, name string) host.Root {
	tb.Helper()
	r := Snapshot(tb, Capture(tb, name))
	ids := filepath.Join(r.Dir(), "usr", "share", "misc", "pci.ids")
	if err := os.MkdirAll(filepath.Dir(ids), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(ids, []byte(RealGPUPCIIDs), 0o644); err != nil {
		tb.Fatal(err)
	}
	return r
}

func unpack(tarball, dir string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if name == "." || strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			if name == "." {
				continue
			}
			return fmt.Errorf("entry %q escapes the root", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		}
	}
}

// RemovedRoot is a host root whose directory was removed after the root was made: every read
// of it fails with fs.ErrNotExist (a host root that went away under a long-running reader).
func RemovedRoot(tb testing.TB) host.Root {
	tb.Helper()
	gone := filepath.Join(tb.TempDir(), "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		tb.Fatal(err)
	}
	r, err := host.NewRoot(gone)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		tb.Fatal(err)
	}
	return r
}
