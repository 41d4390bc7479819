package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// special makes something other than a regular file at p: a symlink to a file outside the
// root, a FIFO, a socket, a character device (/dev/null's numbers) or a directory.
func special(t *testing.T, kind, p, outside string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	switch kind {
	case "symlink":
		err = os.Symlink(outside, p)
	case "fifo":
		err = unix.Mkfifo(p, 0o644)
	case "socket":
		err = unix.Mknod(p, unix.S_IFSOCK|0o644, 0)
	case "device":
		if os.Getuid() != 0 {
			t.Skip("mknod of a device needs root")
		}
		err = unix.Mknod(p, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3)))
	case "directory":
		err = os.Mkdir(p, 0o755)
	default:
		t.Fatalf("unknown kind %s", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// SpecialKinds are the kinds of file special makes.
var specialKinds = []string{"symlink", "fifo", "socket", "device", "directory"}

// TestStateFileOpenRefusesSpecialFiles: a symlink where a state or lock file belongs was
// followed out of the host root (ledger.lock -> a file outside was truncated to the pid, a
// state file linked to /etc/shadow was read), and a FIFO there hung the command for ever.
// Root.OpenFile and Root.ReadFileLimit now refuse anything but a regular file, at once, with
// an error naming the path, what is there and the fix; the target outside is untouched.
func TestStateFileOpenRefusesSpecialFiles(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{false, true} {
		for _, real := range []bool{false, true} {
			for _, kind := range specialKinds {
				name := kind
				if fallback {
					name += "/walk"
				}
				if real {
					name += "/real-root"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					outside := filepath.Join(t.TempDir(), "shadow")
					if err := os.WriteFile(outside, []byte("secret\n"), 0o600); err != nil {
						t.Fatal(err)
					}
					root, err := NewRoot(t.TempDir())
					if err != nil {
						t.Fatal(err)
					}
					root.walk = fallback
					p := root.StateDir("ledger.lock")
					special(t, kind, p, outside)
					if real {
						root = Root{}
					}
					type open struct {
						name string
						do   func() error
					}
					for _, o := range []open{
						{"read", func() error { _, err := root.ReadFileLimit(p, MaxStateFileSize); return err }},
						{"lock", func() error {
							f, err := root.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
							if err == nil {
								f.Close()
							}
							return err
						}},
						{"write-only", func() error {
							f, err := root.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0o644)
							if err == nil {
								f.Close()
							}
							return err
						}},
					} {
						done := make(chan error, 1)
						go func() { done <- o.do() }()
						select {
						case err = <-done:
						case <-time.After(5 * time.Second):
							t.Fatalf("%s of a %s hangs", o.name, kind)
						}
						if !errors.Is(err, ErrNotRegular) {
							t.Errorf("%s of a %s: %v, want ErrNotRegular", o.name, kind, err)
							continue
						}
						for _, want := range []string{p, "remove it"} {
							if !strings.Contains(err.Error(), want) {
								t.Errorf("%s of a %s: error does not say %q: %v", o.name, kind, want, err)
							}
						}
					}
					if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
						t.Errorf("the file outside the root was changed: %q", b)
					}
				})
			}
		}
	}
}

// TestStateFileReadStaysInRoot: a directory component linked out of the root resolves inside
// it, and a regular state file is read as before; a missing one is fs.ErrNotExist.
func TestStateFileReadStaysInRoot(t *testing.T) {
	t.Parallel()
	root, err := NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := root.StateDir("vfio.json")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := root.ReadFileLimit(p, 16); err != nil || string(b) != "{}\n" {
		t.Fatalf("read a regular state file: %q, %v", b, err)
	}
	if _, err := root.ReadFileLimit(p, 2); !errors.Is(err, ErrTooLarge) {
		t.Errorf("past the limit: %v", err)
	}
	if _, err := root.ReadFileLimit(root.StateDir("none.json"), 16); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "sriov.json"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, root.Etc("vgpu-host")); err != nil && !errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(root.Etc(), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, root.Etc("vgpu-host")); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := root.ReadFileLimit(root.Etc("vgpu-host", "sriov.json"), 16); err == nil {
		t.Errorf("read through etc/vgpu-host -> %s: %q", outside, b)
	}
}

// TestMkdirAllStaysInRoot: MkdirAll of a state directory under a fake root whose var is a
// symlink out of it created the directories on the other side of the link.
func TestMkdirAllStaysInRoot(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{false, true} {
		root, err := NewRoot(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		root.walk = fallback
		outside := t.TempDir()
		if err := os.Symlink(outside, root.Path("var")); err != nil {
			t.Fatal(err)
		}
		err = root.MkdirAll(root.StateDir("vms"), 0o755)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "outside the host root") {
			t.Errorf("fallback %v: MkdirAll through var -> %s: %v", fallback, outside, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Errorf("fallback %v: created outside the root: %v", fallback, ents)
		}
		// A link inside the tree is followed, as the state writes follow it.
		if err := os.Remove(root.Path("var")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(root.Path("persist"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("persist", root.Path("var")); err != nil {
			t.Fatal(err)
		}
		if err := root.MkdirAll(root.StateDir("vms"), 0o755); err != nil {
			t.Errorf("fallback %v: MkdirAll through a link inside the root: %v", fallback, err)
		}
		if st, err := os.Stat(root.Path("persist", "lib", "vgpu-host", "vms")); err != nil || !st.IsDir() {
			t.Errorf("fallback %v: not created through the link inside the root: %v", fallback, err)
		}
	}
}

// TestQuarantinesAbsentOrOutside: a root without the quarantine directory has no quarantine
// (one stat, nothing listed); one whose var/lib/vgpu-host leads out of the root is still
// refused, not listed, whatever lies on the other side.
func TestQuarantinesAbsentOrOutside(t *testing.T) {
	t.Parallel()
	root, err := NewRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if qs, err := Quarantines(root); err != nil || qs != nil {
		t.Fatalf("no state directory: %v, %v; want none and no error", qs, err)
	}
	outside := t.TempDir()
	a := MustParseAddress("0000:41:00.0")
	if err := os.MkdirAll(filepath.Join(outside, "quarantine"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "quarantine", a.String()+".json"), []byte(`{"version":1,"address":"0000:41:00.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root.Path("var", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, root.Path("var", "lib", "vgpu-host")); err != nil {
		t.Fatal(err)
	}
	if qs, err := Quarantines(root); !errors.Is(err, ErrRefused) || len(qs) != 0 {
		t.Errorf("state directory linked to %s: %v, %v; want refused", outside, qs, err)
	}
}
