package clitree

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/fetch/httpget"
	"github.com/vgpu-host/vgpu-host/virt"
)

// TestFetchISOApply: apply of a spec whose CD comes from a URL downloads it into the pool
// through vgpu-host-agent --fetch-iso (vgpu-host links no net/http), printing the download's
// progress; a second apply downloads nothing. A wrong checksum exits 2 and a missing file 6,
// as when the download ran in-process, with the message and nothing left in the pool; a
// downloader that fails otherwise is reported as such, and with no vgpu-host-agent to run,
// apply says what is missing (exit 7).
func TestFetchISOApply(t *testing.T) {
	bin := binary(t) // cmd/vgpu-host-agent: it is vgpu-host too
	t.Setenv("VGPU_HOST_AGENT_BIN", bin)
	testFetchISOApply(t, nil)
}

// TestFetchISOApplyInProcess: the same in a tree whose Env downloads in-process, as
// vgpu-host-agent's does (internal/agentcmd): the same answers, and VGPU_HOST_AGENT_BIN plays
// no part.
func TestFetchISOApplyInProcess(t *testing.T) {
	testFetchISOApply(t, httpget.Fetch)
}

// testFetchISOApply is TestFetchISOApply with Env.FetchISO fetch (nil: the light CLI's).
func testFetchISOApply(t *testing.T, fetch func(ctx context.Context, url, checksum, dest string, progress io.Writer) error) {
	runErr := runErr
	if fetch != nil {
		runErr = func(t *testing.T, args ...string) (string, error) {
			env := testEnv()
			env.FetchISO = fetch
			app := newApp(env)
			var out bytes.Buffer
			app.Writer, app.ErrWriter = &out, &out
			err := app.Run(context.Background(), append([]string{"vgpu-host"}, args...))
			return out.String(), err
		}
	}
	iso := bytes.Repeat([]byte("iso9660!"), 32<<10) // 256 KiB
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path != "/installer.iso" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(iso)))
		w.Write(iso)
	}))
	defer srv.Close()
	dir := t.TempDir()
	root, err := host.NewRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	uri := virt.FileScheme + "://" + filepath.Join(dir, "libvirt.json")
	pool := root.StateDir("images")
	sum := sha256.Sum256(iso)
	spec := func(name, path string, sum [32]byte) string {
		p := deviceFreeVM(t, dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		cd := fmt.Sprintf("      format: qcow2\n    - device: cdrom\n      url: %s%s\n      checksum: sha256:%x\n", srv.URL, path, sum)
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), "      format: qcow2\n", cd, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// apply returns what apply printed, its error's text last, and its exit code.
	apply := func(spec string) (string, int) {
		out, err := runErr(t, "--host-root", dir, "apply", "--connect", uri, "--virt-type", "qemu", spec)
		if err != nil {
			out += "vgpu-host: " + err.Error() + "\n"
		}
		return out, exitCode(err)
	}

	out, code := apply(spec("fetched", "/installer.iso", sum))
	if code != 0 || !strings.Contains(out, "fetch installer.iso: 100% (256 KiB of 256 KiB)") {
		t.Fatalf("apply: exit %d, want 0 and the download's progress:\n%s", code, out)
	}
	if got, err := os.ReadFile(filepath.Join(pool, "installer.iso")); err != nil || !bytes.Equal(got, iso) {
		t.Fatalf("the pool's installer.iso: %d bytes, %v; want the served file", len(got), err)
	}
	if out, code := apply(spec("again", "/installer.iso", sum)); code != 0 || hits != 1 || strings.Contains(out, "fetch installer.iso: 100%") {
		t.Errorf("second apply: exit %d, %d downloads (want 1):\n%s", code, hits, out)
	}

	for _, c := range []struct {
		name, path string
		sum        [32]byte
		code       int
		want       string
	}{
		{"badsum", "/installer.iso", sha256.Sum256([]byte("another file")), exitUsage, "checksum mismatch"},
		{"missing", "/missing.iso", sum, exitNotFound, "the server answered 404 Not Found"},
	} {
		out, code := apply(spec(c.name, c.path, c.sum))
		if code != c.code || !strings.Contains(out, "fetch "+srv.URL+c.path+": ") || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want %d and %q:\n%s", c.name, code, c.code, c.want, out)
		}
	}
	// The download and its sidecar, nothing of the failed ones (no partial file).
	if left, _ := filepath.Glob(filepath.Join(pool, "*")); len(left) != 2 || filepath.Base(left[0]) != ".installer.iso.checksum" || filepath.Base(left[1]) != "installer.iso" {
		t.Errorf("the pool holds %v, want installer.iso and its sidecar alone", left)
	}

	if fetch != nil {
		// vgpu-host-agent downloads itself: VGPU_HOST_AGENT_BIN, the light binary's way to
		// its downloader, changes nothing (the server's own answer comes back).
		t.Setenv("VGPU_HOST_AGENT_BIN", filepath.Join(t.TempDir(), "none"))
		if out, code := apply(spec("inprocess", "/other.iso", sum)); code != exitNotFound || !strings.Contains(out, "the server answered 404 Not Found") {
			t.Errorf("agent build with VGPU_HOST_AGENT_BIN unset to nothing: exit %d, want %d and the server's answer:\n%s", code, exitNotFound, out)
		}
		return
	}
	// A program that is not the downloader (a crash, an older vgpu-host-agent): its failure.
	if f, err := exec.LookPath("false"); err == nil {
		t.Setenv("VGPU_HOST_AGENT_BIN", f)
		if out, code := apply(spec("notfetcher", "/other.iso", sum)); code != exitFailure || !strings.Contains(out, f+" "+fetchISOFlag+": exit status 1") {
			t.Errorf("%s as the downloader: exit %d, want 1 and its failure:\n%s", f, code, out)
		}
	}
	t.Setenv("VGPU_HOST_AGENT_BIN", filepath.Join(t.TempDir(), "none"))
	if out, code := apply(spec("noagent", "/other.iso", sum)); code != exitUnsupported || !strings.Contains(out, AgentBinary+" not found") {
		t.Errorf("no %s: exit %d, want %d and what is missing:\n%s", AgentBinary, code, exitUnsupported, out)
	}
}
