package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/step"
	"github.com/vgpu-host/vgpu-host/virt"
)

// Export formats: what `image export --format` accepts.
const (
	// FormatQcow2 is a standalone qcow2, compressed unless ExportOptions.NoCompress.
	FormatQcow2 = "qcow2"
	// FormatRaw is a raw image with every block allocated on disk (qemu-img convert -S 0),
	// for targets that cannot read holes (dd to a device, some clouds' importers).
	FormatRaw = "raw"
	// FormatSparse is a raw image whose zero runs stay holes: its virtual size on the disk's
	// allocated blocks only.
	FormatSparse = "sparse"
)

// SealOperations are the virt-sysprep operations a sealed export runs, in virt-sysprep's
// names. With SealCustomize they leave no trace of the builder VM that a new instance would
// inherit: its identity (machine-id, SSH host keys), its cloud-init instance, user data and
// seed, its logs and its leases. docs/image.md lists what each removes.
var SealOperations = []string{
	"machine-id",            // /etc/machine-id emptied, /var/lib/dbus/machine-id removed: systemd makes a new one at first boot
	"ssh-hostkeys",          // /etc/ssh/*_host_* removed: cloud-init's ssh module makes new ones
	"ssh-userdir",           // ~/.ssh of every user: the builder's authorized keys
	"logfiles",              // /var/log/*.log* (cloud-init.log, cloud-init-output.log), apt's logs, …
	"bash-history",          // the shells' history
	"tmp-files",             // /tmp, /var/tmp
	"utmp",                  // /var/run/utmp
	"dhcp-client-state",     // the builder's leases
	"net-hwaddr",            // MAC addresses written into network configuration
	"udev-persistent-net",   // udev's persistent NIC names bound to the builder's MAC
	"package-manager-cache", // apt's downloaded .debs
	"crash-data",            // kernel crash dumps
	"customize",             // runs SealCustomize
}

// SealCustomize are the customize operation's steps (virt-sysprep options): delete cloud-init's
// state, which holds the builder's instance, its user data, its seed and the semaphores that
// would make the copy skip its first boot, and the systemd journal. The customize operation
// itself first writes a random seed and a machine-id (libguestfs 1.48: "Setting the machine ID
// in /etc/machine-id", after the machine-id operation emptied it), which every copy would then
// share: the seed file goes and /etc/machine-id is emptied again, so systemd makes both anew at
// each copy's first boot.
var SealCustomize = []string{
	"--delete", "/var/lib/cloud",
	"--delete", "/var/log/journal/*",
	"--delete", "/var/lib/systemd/random-seed",
	"--truncate", "/etc/machine-id",
}

// ExportOptions says how Export writes the image.
type ExportOptions struct {
	// Format is FormatQcow2 (default), FormatRaw or FormatSparse.
	Format string
	// NoCompress writes qcow2 clusters uncompressed (larger, faster to write and to boot).
	NoCompress bool
	// Seal runs virt-sysprep (SealOperations) on the exported copy, never on the VM's disk.
	Seal bool
	// Force replaces an existing destination.
	Force bool
	// DryRun resolves everything and returns the commands without running them.
	DryRun bool
	// Progress receives qemu-img's progress (-p) and virt-sysprep's steps; nil is quiet.
	Progress io.Writer
}

// ExportResult is what Export wrote (or, in a dry run, would write).
type ExportResult struct {
	VM          string `json:"vm"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Format      string `json:"format"`
	Compressed  bool   `json:"compressed"`
	// VirtualSize is the disk size the guest sees, in bytes.
	VirtualSize int64 `json:"virtual_size"`
	// Allocated is the bytes the image takes on the host's disk (blocks allocated).
	Allocated int64    `json:"allocated_bytes"`
	Sealed    bool     `json:"sealed"`
	SealOps   []string `json:"seal_operations,omitempty"`
	// Duration is the whole export in seconds.
	Duration float64 `json:"duration_seconds"`
	DryRun   bool    `json:"dry_run,omitempty"`
	// Commands are the command lines run (or, in a dry run, to be run), shell-quoted.
	Commands []string `json:"commands"`
}

// Export flattens the VM's first overlay (its base image and everything written since) into a
// standalone image at dst, in the format asked, and seals the copy when asked. The domain must
// be shut off. The image is written beside dst as dst.partial and renamed to dst only when
// every step succeeded, so dst is never a half image; a failed export removes dst.partial.
func (l *Lifecycle) Export(ctx context.Context, name, dst string, o ExportOptions) (*ExportResult, error) {
	start := time.Now()
	if o.Format == "" {
		o.Format = FormatQcow2
	}
	if o.Format != FormatQcow2 && o.Format != FormatRaw && o.Format != FormatSparse {
		return nil, fmt.Errorf("export %s: unknown format %q: use qcow2, raw or sparse: %w", name, o.Format, host.ErrInvalid)
	}
	if o.NoCompress && o.Format != FormatQcow2 {
		return nil, fmt.Errorf("export %s: --no-compress is for qcow2 only (%s is never compressed): %w", name, o.Format, host.ErrInvalid)
	}
	src, err := l.exportSource(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(dst); err == nil && !o.Force {
		return nil, fmt.Errorf("export %s: %s exists: %w (pass --force to overwrite it, or choose another destination)", name, dst, host.ErrRefused)
	}
	tmp := dst + ".partial"
	res := &ExportResult{VM: name, Source: src, Destination: dst, Format: o.Format,
		Compressed: o.Format == FormatQcow2 && !o.NoCompress, Sealed: o.Seal, DryRun: o.DryRun}
	convert := convertArgs(o, src, tmp)
	res.Commands = append(res.Commands, shellJoin(convert))
	var seal []string
	if o.Seal {
		res.SealOps = SealOperations
		seal = sysprepArgs(o.Format, tmp)
		res.Commands = append(res.Commands, "LIBGUESTFS_BACKEND=direct "+shellJoin(seal))
	}
	res.Commands = append(res.Commands, shellJoin([]string{"mv", "--", tmp, dst}))
	if o.DryRun {
		res.Duration = time.Since(start).Seconds()
		return res, nil
	}
	if o.Seal {
		if err := sealReady(); err != nil {
			return nil, fmt.Errorf("export %s --seal: %w", name, err)
		}
	}
	release, err := claimPartial(tmp)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", name, err)
	}
	defer release()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if err := run(ctx, convert, nil, o.Progress); err != nil {
		return nil, fmt.Errorf("export %s: %w", name, err)
	}
	if o.Seal {
		if err := run(ctx, seal, sysprepEnv(), o.Progress); err != nil {
			return nil, fmt.Errorf("export %s: seal %s: %w%s", name, tmp, err, sysprepHint(err))
		}
	}
	if res.VirtualSize, res.Allocated, err = imageSize(ctx, tmp, o.Format); err != nil {
		return nil, fmt.Errorf("export %s: %w", name, err)
	}
	if err := publish(tmp, dst, o.Force); err != nil {
		return nil, fmt.Errorf("export %s: %w", name, err)
	}
	ok = true
	res.Duration = time.Since(start).Seconds()
	return res, nil
}

// exportSource returns the path of the VM's overlay, after checking that the VM is vgpu-host's,
// has an overlay and is shut off.
func (l *Lifecycle) exportSource(ctx context.Context, name string) (string, error) {
	book, err := l.o.Ledger.Read()
	if err != nil {
		return "", err
	}
	e := book.VM(name)
	if e == nil {
		return "", fmt.Errorf("export %s: not in the ledger: %w", name, host.ErrNotFound)
	}
	var vol, pool string
	for _, s := range e.Live() {
		if ov, err := step.Decode(s.Action, s.Target, s.Params); err == nil && s.Status == ledger.StepDone {
			if o, ok := ov.(step.CreateOverlay); ok {
				vol, pool = o.Volume, o.Pool
				break
			}
		}
	}
	if vol == "" {
		return "", fmt.Errorf("export %s: it has no overlay disk created by vgpu-host: %w", name, host.ErrNotFound)
	}
	if st, err := l.o.Conn.State(ctx, name); err == nil && st != virt.StateShutoff {
		return "", fmt.Errorf("export %s: the domain is %s; shut it down first (apply --wait-shutdown waits for a builder VM): %w", name, st, host.ErrBusy)
	}
	src, err := l.o.Conn.VolumePath(ctx, pool, vol)
	if err != nil {
		return "", fmt.Errorf("export %s: %w", name, err)
	}
	return src, nil
}

// convertArgs is the qemu-img command line that writes the image. "--": the paths are never
// taken for options (an output named "-f.qcow2").
func convertArgs(o ExportOptions, src, dst string) []string {
	args := []string{"qemu-img", "convert", "-O"}
	switch o.Format {
	case FormatQcow2:
		args = append(args, "qcow2")
		if !o.NoCompress {
			args = append(args, "-c")
		}
	case FormatRaw:
		args = append(args, "raw", "-S", "0")
	case FormatSparse:
		args = append(args, "raw")
	}
	if o.Progress != nil {
		args = append(args, "-p")
	}
	return append(args, "--", src, dst)
}

// sysprepArgs is the virt-sysprep command line that seals the image at path.
func sysprepArgs(format, path string) []string {
	f := "raw"
	if format == FormatQcow2 {
		f = "qcow2"
	}
	args := []string{"virt-sysprep", "--format", f, "-a", path, "--operations", strings.Join(SealOperations, ",")}
	return append(args, SealCustomize...)
}

// sysprepEnv is the environment virt-sysprep runs in: libguestfs's direct backend (its own
// QEMU appliance, no libvirt session needed). LIBGUESTFS_BACKEND_SETTINGS=force_tcg, when the
// caller sets it, makes that appliance use TCG where /dev/kvm exists but does not work (nested).
func sysprepEnv() []string {
	return append(os.Environ(), "LIBGUESTFS_BACKEND=direct")
}

// sealReady checks what virt-sysprep needs before anything is written: the tool, and a
// readable kernel for its appliance (supermin builds it from the host's /boot).
func sealReady() error {
	if _, err := exec.LookPath("virt-sysprep"); err != nil {
		return fmt.Errorf("virt-sysprep not found: install Debian's libguestfs-tools (apt-get install libguestfs-tools): %w", host.ErrUnsupported)
	}
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(kernels) == 0 {
		return fmt.Errorf("libguestfs needs a kernel for its appliance and /boot has no vmlinuz-*: install linux-image-amd64: %w", host.ErrUnsupported)
	}
	for _, k := range kernels {
		f, err := os.Open(k)
		if err == nil {
			f.Close()
			return nil
		}
	}
	return fmt.Errorf("libguestfs needs a readable kernel for its appliance and no %s is readable by this user: chmod 0644 /boot/vmlinuz-* (or run as root): %w",
		strings.Join(kernels, ", "), host.ErrUnsupported)
}

// sysprepHint names the fix for virt-sysprep's common failures.
func sysprepHint(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "supermin") || strings.Contains(s, "kernel"):
		return " (libguestfs could not build its appliance: /boot/vmlinuz-* must be readable and linux-image-amd64 installed; `libguestfs-test-tool` shows the details)"
	case strings.Contains(s, "/dev/kvm") || strings.Contains(s, "signal: killed") || strings.Contains(s, "context deadline exceeded"):
		return " (where /dev/kvm exists but nested KVM does not work, set LIBGUESTFS_BACKEND_SETTINGS=force_tcg: slower, but it works)"
	}
	return " (`LIBGUESTFS_BACKEND=direct libguestfs-test-tool` checks libguestfs on this host)"
}

// claimPartial takes dst.partial for this export: an flock on the file itself, so a second
// export to the same destination is refused while this one writes, and a partial file left by
// an export that was killed is taken over (the kernel dropped its lock).
func claimPartial(tmp string) (func(), error) {
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is being written by another export: %w", tmp, host.ErrBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	return func() { f.Close() }, nil
}

// publish renames tmp to dst: over an existing dst only with force, else with
// RENAME_NOREPLACE, so a file created at dst meanwhile is never replaced.
func publish(tmp, dst string, force bool) error {
	if force {
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("rename %s to %s: %w", tmp, dst, err)
		}
		return nil
	}
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s appeared while exporting: %w (pass --force to overwrite it)", dst, host.ErrRefused)
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		// A filesystem without RENAME_NOREPLACE: the check before the copy has to do.
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("rename %s to %s: %w", tmp, dst, err)
		}
		return nil
	}
	return fmt.Errorf("rename %s to %s: %w", tmp, dst, err)
}

// imageSize returns the image's virtual size and the bytes it takes on disk.
func imageSize(ctx context.Context, path, format string) (virtual, allocated int64, err error) {
	f := "raw"
	if format == FormatQcow2 {
		f = "qcow2"
	}
	var out strings.Builder
	cmd := exec.CommandContext(ctx, "qemu-img", "info", "--output", "json", "-f", f, "--", path)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("qemu-img info %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	var info struct {
		Virtual int64 `json:"virtual-size"`
		Actual  int64 `json:"actual-size"`
	}
	if err := json.Unmarshal([]byte(out.String()), &info); err != nil {
		return 0, 0, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	return info.Virtual, info.Actual, nil
}

// run runs argv with env (nil: this process's), its output to progress, and returns an error
// with the command line and the tail of what it printed on stderr.
func run(ctx context.Context, argv, env []string, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var stderr tailBuffer
	cmd.Stdout = progress
	cmd.Stderr = &stderr
	if progress != nil {
		cmd.Stderr = io.MultiWriter(progress, &stderr)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return fmt.Errorf("%s: %w: %s", shellJoin(argv), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// tailBuffer keeps the last 4 KiB written to it: enough of a tool's stderr for an error.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// shellJoin quotes argv for a POSIX shell: words of safe characters as they are, others in
// single quotes.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		safe := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./,:=+@%", r)) {
				safe = false
				break
			}
		}
		if safe {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
