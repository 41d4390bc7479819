// Package testenv gives tests the real things they need (root, a running libvirtd) and decides
// when a test may skip: only in a quick local loop, never in CI (CI=true), where a missing
// prerequisite is a failure.
package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// EnvLibvirtd enables tests that need a real libvirtd. `make test` sets it; `make test-unit` does not.
// Its value LibvirtdRanElsewhere says that this run is a second pass over the same tests (the
// agent build's, -tags agent) whose real-libvirtd tests the first pass of the same CI job ran:
// they skip, saying so, instead of running twice.
const EnvLibvirtd = "VGPU_TEST_LIBVIRTD"

// LibvirtdRanElsewhere is EnvLibvirtd's value for a pass whose libvirtd tests another pass ran.
const LibvirtdRanElsewhere = "ran-in-the-untagged-pass"

// skipOrFail skips locally but fails in CI.
func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI must run this test, but: %s", why)
	}
	t.Skip(why)
}

// RequireRoot skips (locally) or fails (CI) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root")
	}
}

// LibvirtSocket is where libvirtd (monolithic, Debian 12) listens for qemu:///system.
const LibvirtSocket = "/run/libvirt/libvirt-sock"

// Libvirtd makes sure virtlogd and libvirtd run on this machine (starting them as root when
// they do not) and returns the URI to connect to. Tests using it create only domains and
// volumes named with the "vgpuhost-test-" prefix and remove them when they end.
func Libvirtd(t testing.TB) string {
	t.Helper()
	switch os.Getenv(EnvLibvirtd) {
	case "":
		skipOrFail(t, "needs a real libvirtd: run with "+EnvLibvirtd+"=1 (make test does)")
	case LibvirtdRanElsewhere:
		t.Skip("its real-libvirtd run is make test-go's untagged pass (" + EnvLibvirtd + "=" + LibvirtdRanElsewhere + ")")
	}
	RequireRoot(t)
	if err := StartLibvirtd(); err != nil {
		t.Fatalf("start libvirtd: %v", err)
	}
	return "qemu:///system"
}

// StartLibvirtd starts virtlogd and libvirtd when libvirtd's socket does not answer, and waits
// up to 30 s for it. It is safe to call from several test processes at once.
func StartLibvirtd() error {
	if socketAnswers() {
		return nil
	}
	// Not "unless pgrep finds one": pgrep also sees the daemons of a child PID namespace (a
	// chroot's or a container's), whose socket is not this one. A second start here fails on
	// the pidfile, which is fine.
	for _, d := range []string{"virtlogd", "libvirtd"} {
		_ = exec.Command(d, "-d").Run()
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if socketAnswers() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &net.OpError{Op: "dial", Net: "unix", Err: os.ErrDeadlineExceeded}
}

func socketAnswers() bool {
	c, err := net.DialTimeout("unix", LibvirtSocket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// RequireTool skips (locally) or fails (CI) unless the command is on PATH; pkg names the
// Debian package that has it (scripts/deps.sh installs it).
func RequireTool(t testing.TB, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		skipOrFail(t, tool+" not installed (Debian package "+pkg+"; make deps)")
	}
	return p
}

// SkipOrFail skips the test in a local loop but fails it in CI (CI set), where every test
// must run.
func SkipOrFail(t testing.TB, why string) {
	t.Helper()
	skipOrFail(t, why)
}
