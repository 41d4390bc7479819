package clitree

import (
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/ledger"
)

// TestMdevCreateFirstIndexRange: --first-index -3 and 9223372036854775807 were accepted (the
// second overflowed FirstIndex+i). A VM's instances are numbered 0..255 as apply numbers them;
// anything outside, or a count that runs past 255, is a usage error naming the range.
func TestMdevCreateFirstIndexRange(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	r := tr.Dir()
	create := []string{"--host-root", r, "mdev", "create", "--parent", "mbochs", "--type", "small", "--name", "vm1"}
	for _, c := range [][]string{
		{"--first-index=-3"},
		{"--first-index", "-3"},
		{"--first-index", "9223372036854775807"},
		{"--first-index", "256"},
		{"--first-index", "255", "--count", "2"},
	} {
		out, err := runErr(t, append(append([]string{}, create...), c...)...)
		if code := exitCode(err); code != exitUsage {
			t.Errorf("%v: exit %d, want 2: %v\n%s", c, code, err, out)
			continue
		}
		if c[0] != "--first-index" || c[1] != "-3" { // "-3" alone may read as a flag to the parser
			if !strings.Contains(err.Error(), "0..255") {
				t.Errorf("%v: the error does not name the range: %v", c, err)
			}
		}
	}
	if out, code := run(t, append(create, "--first-index", "255", "--dry-run")...); code != 0 {
		t.Errorf("--first-index 255: exit %d\n%s", code, out)
	}
}

// TestDestroyMalformedNameExits2: destroy ../../etc exited 6 (not found) where the README
// gives a malformed name 2; and nothing is destroyed when one of the names is malformed.
func TestDestroyMalformedNameExits2(t *testing.T) {
	tr := hosttest.New(t)
	fakeLibvirt(t)
	for _, args := range [][]string{{"../../etc"}, {"ok", "a/b"}, {".."}} {
		out, err := runErr(t, append([]string{"--host-root", tr.Dir(), "destroy"}, args...)...)
		if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "VM name") {
			t.Errorf("destroy %v: exit %d, want 2 naming the VM name: %v\n%s", args, code, err, out)
		}
	}
}

// TestHostRestoreDamagedStateExits1: host restore exited 2 (bad input) for a damaged state
// file; docs/security.md and the README give damaged state 1.
func TestHostRestoreDamagedStateExits1(t *testing.T) {
	t.Parallel()
	tr := hosttest.New(t)
	tr.Mbochs()
	withKernel(t, tr)
	tr.WriteFile("etc/vgpu-host/sriov.json", `{"version": 1, "pfs": [`)
	out, err := runErr(t, "--host-root", tr.Dir(), "host", "restore")
	if code := exitCode(err); code != exitFailure || !strings.Contains(err.Error(), "sriov.json") {
		t.Fatalf("restore with a damaged sriov.json: exit %d, want 1: %v\n%s", code, err, out)
	}
}

// TestStatusStrayOldLedger: a v1 ledger.json beside the v2 ledger hid every VM from status.
// Now status names both files, lists the ledger directory's VMs, and exits 1.
func TestStatusStrayOldLedger(t *testing.T) {
	tr := hosttest.New(t)
	fakeLibvirt(t)
	l := ledger.Open(tr.Root)
	if err := l.Update(func(b *ledger.Book) error {
		return b.Claim("live", ledger.Claim{Kind: ledger.KindPCI, ID: "0000:41:00.0"})
	}); err != nil {
		t.Fatal(err)
	}
	tr.WriteFile("var/lib/vgpu-host/ledger.json", `{"version":1,"vms":{}}`)
	out, err := runErr(t, "--host-root", tr.Dir(), "-o", "json", "status")
	if code := exitCode(err); code != exitFailure || !strings.Contains(err.Error(), tr.Root.StateDir("ledger.json")) ||
		!strings.Contains(err.Error(), l.Path()) {
		t.Fatalf("status beside a stray ledger.json: exit %d, want 1 naming both: %v", code, err)
	}
	if !strings.Contains(out, `"name": "live"`) {
		t.Errorf("status did not list the live VM:\n%s", out)
	}
}
