package remote

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpu-host/vgpu-host/host"
)

// Helper is a helper binary opened once: the checks (trustedHelper's, for a path from the
// environment) are made on the open descriptor, and Command runs the same descriptor, through
// /proc/self/fd, never the path again. Checking a path and then executing the path let a
// symlink flipped between the two make root run another file (15 times in 300 tries).
type Helper struct {
	// Path is the path the helper was found at, for messages and the child's argv[0].
	Path string
	f    *os.File
}

// refusal is a trust refusal: its message says what is wrong and the fix, and it matches
// host.ErrRefused (exit 4) without ErrRefused's own text, whose "use --force" does not apply.
type refusal struct{ msg string }

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == host.ErrRefused }

func refuse(format string, a ...any) error { return &refusal{msg: fmt.Sprintf(format, a...)} }

// OpenHelper finds a helper as FindHelper does and opens it; a path from env is checked on the
// descriptor as trustedHelper says. The caller closes it.
func OpenHelper(name, env, purpose string, notFound error) (*Helper, error) {
	p, fromEnv, err := findHelper(os.Getenv, name, env, purpose, notFound)
	if err != nil {
		return nil, err
	}
	if !fromEnv {
		env = ""
	}
	return openHelper(p, env)
}

// openHelper opens the helper at p for executing. With env set (p came from that variable), p
// is resolved once, its directory opened and checked on that descriptor, and the file opened
// in it without following a link and checked on its own descriptor (trustedHelper).
func openHelper(p, env string) (*Helper, error) {
	if env == "" {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", p, err)
		}
		return &Helper{Path: p, f: os.NewFile(uintptr(fd), p)}, nil
	}
	f, err := trustedHelper(p, env)
	if err != nil {
		return nil, err
	}
	return &Helper{Path: p, f: f}, nil
}

// Close closes the helper's descriptor; commands already started keep running.
func (h *Helper) Close() error { return h.f.Close() }

// Command returns the command that runs the opened helper with args: the descriptor is
// handed to the child as its fd 3 (ExtraFiles) and executed as /proc/self/fd/3, so the file
// run is the file checked, whatever its path names by then. A script helper works too: its
// interpreter reads it through the same /proc/self/fd path. The caller must not replace
// ExtraFiles; the descriptor must stay open until the command has started.
func (h *Helper) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/proc/self/fd/3", args...)
	cmd.Args[0] = h.Path
	cmd.ExtraFiles = []*os.File{h.f}
	return cmd
}

// Exec replaces this process with the opened helper (argv[0] is argv's first element). The
// descriptor is made inheritable and executed through /proc/self/fd, as Command does.
func (h *Helper) Exec(argv, envv []string) error {
	fd := int(h.f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("run %s: %w", h.Path, err)
	}
	if err := unix.Exec("/proc/self/fd/"+strconv.Itoa(fd), argv, envv); err != nil {
		return fmt.Errorf("run %s (through /proc/self/fd/%d; is /proc mounted?): %w", h.Path, fd, err)
	}
	return nil
}

// Start starts the helper with --serve (its stderr is ours) and returns the pipe to it (its
// stdout to read, its stdin to write; closing it ends the helper's input) and the function
// that waits for it to exit. The helper's descriptor is closed: it is not needed once the
// child runs.
func (h *Helper) Start() (io.ReadWriteCloser, func() error, error) { return h.StartEnv(nil) }

// StartEnv is Start with the helper's environment environ (os/exec's Cmd.Env: nil is this
// process's).
func (h *Helper) StartEnv(environ []string) (io.ReadWriteCloser, func() error, error) {
	defer h.Close()
	cmd := h.Command(context.Background(), "--serve")
	cmd.Env, cmd.Stderr = environ, os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", h.Path, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", h.Path, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s (through /proc/self/fd; is /proc mounted?): %w", h.Path, err)
	}
	return pipe{out, in}, cmd.Wait, nil
}

// fromEnv records the paths FindHelper took from a helper's environment variable (path →
// variable), so that StartHelper, given only the path, checks again on the descriptor it runs:
// FindHelper's own check was made on a path that may name another file by then.
var fromEnv sync.Map

// trustedHelper opens the helper named by the environment variable env (a path p) for
// executing, and accepts it only when root (or the user running vgpu-host) owns it and nobody
// else can change it: the file and its directory are owned by root or the invoking user, and
// neither is writable by group or others (a directory with the sticky bit, such as /tmp, may
// be: others cannot replace a file they do not own in it). vgpu-host runs as root, so without
// this check the variable would make root run whatever another user put in a file they can
// write.
//
// p is resolved once; the directory is opened and checked on its descriptor, the file opened
// relative to it without following a link, and checked on its own descriptor, which the
// caller executes: a link flipped after the resolution can only make the open fail or open a
// file that is then checked. Errors say what is wrong and the fix, and match host.ErrRefused.
func trustedHelper(p, env string) (*os.File, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", env, p, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", env, p, err)
	}
	dir, base := filepath.Dir(real), filepath.Base(real)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: open %s: %w", env, p, dir, err)
	}
	defer unix.Close(dfd)
	if err := checkOwner(dfd, true, dir, p, env); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(dfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: open %s: %w", env, p, real, err)
	}
	f := os.NewFile(uintptr(fd), real)
	if err := checkOwner(fd, false, real, p, env); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkOwner is trustedHelper's check of one open descriptor: the helper file (a regular
// file) or its directory (dir).
func checkOwner(fd int, dir bool, path, p, env string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s=%s: stat %s: %w", env, p, path, err)
	}
	if !dir && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refuse("%s=%s: refusing to run it: %s is not a regular file; point %s at the helper binary itself",
			env, p, path, env)
	}
	uid := os.Getuid()
	if owner := int(st.Uid); owner != 0 && owner != uid {
		return refuse("%s=%s: refusing to run it: %s is owned by uid %d, not by root or by you (uid %d); chown it or unset %s",
			env, p, path, owner, uid, env)
	}
	sticky := st.Mode&unix.S_ISVTX != 0
	if perm := st.Mode & 0o777; perm&0o022 != 0 && !(dir && sticky) {
		return refuse("%s=%s: refusing to run it: %s is writable by group or others (mode %04o), so anyone could change what root runs; chmod go-w it or unset %s",
			env, p, path, perm, env)
	}
	return nil
}
