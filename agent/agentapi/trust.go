package agentapi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// ErrUntrustedSocket is wrapped by the error of a socket, or a directory on its path, that
// someone other than root (or the agent's own uid) could have put there: whoever answers on
// it could be anyone, and would receive the caller's commands and files.
var ErrUntrustedSocket = errors.New("untrusted agent socket")

// ErrSocketPermission is wrapped by the error of a socket the caller may not connect to
// (EACCES): an agent may well answer there, for root and its group.
var ErrSocketPermission = errors.New("permission denied on the agent socket")

// UntrustedSocketError says which file or directory makes a socket untrusted, and why.
// It wraps ErrUntrustedSocket.
type UntrustedSocketError struct {
	// Socket is the agent socket's path; Path is the file or directory at fault (Socket itself,
	// its directory, or a directory or link above it).
	Socket, Path string
	// UID and Mode are Path's owner and mode, as lstat(2) gives them (links are not followed).
	UID  uint32
	Mode os.FileMode
	// Problem is what is wrong with Path ("is owned by uid 65534", "is writable by group or
	// others"); Fix is what to do about it.
	Problem, Fix string

	dirOnly bool // Socket is the directory the agent would bind its socket in
}

func (e *UntrustedSocketError) Error() string {
	what, of := "its directory "+e.Path, "agent socket"
	switch {
	case e.dirOnly && e.Path == e.Socket:
		what, of = "it", "agent socket directory"
	case e.dirOnly:
		what, of = e.Path+", above it,", "agent socket directory"
	case e.Path == e.Socket:
		what = "the socket"
	case e.Path != filepath.Dir(e.Socket):
		what = e.Path + ", above it,"
	}
	return fmt.Sprintf("untrusted %s %s: %s %s (owner uid %d, mode %s): whoever controls it can answer in the agent's place and receive its callers' commands and files; %s",
		of, e.Socket, what, e.Problem, e.UID, e.Mode, e.Fix)
}

// Unwrap returns ErrUntrustedSocket.
func (e *UntrustedSocketError) Unwrap() error { return ErrUntrustedSocket }

// SocketPermissionError is a connection refused by the socket's own permissions (EACCES).
// It wraps ErrSocketPermission, and is ErrUnreachable too: to this caller, no agent answers,
// so a CLI in auto mode runs the command itself.
type SocketPermissionError struct {
	// Socket is the socket's path; UID, GID and Mode its owner, group and mode (zero when
	// lstat failed too).
	Socket   string
	UID, GID uint32
	Mode     os.FileMode
}

func (e *SocketPermissionError) Error() string {
	return fmt.Sprintf("%s %s (owner uid %d, group gid %d, mode %s): to use the agent, join its group (gid %d; log in again after), or run as root; or run the command in-process with --agent never",
		ErrSocketPermission, e.Socket, e.UID, e.GID, e.Mode, e.GID)
}

// Unwrap returns ErrSocketPermission.
func (e *SocketPermissionError) Unwrap() error { return ErrSocketPermission }

// Is reports ErrUnreachable as well: an agent this caller may not reach does not answer it.
func (e *SocketPermissionError) Is(target error) bool { return target == ErrUnreachable }

// trustedOwners is who may own a socket's file and directories: the uids given, else root
// and this process's effective uid (an agent run by the caller itself is the caller's).
func trustedOwners(uids []uint32) []uint32 {
	if len(uids) > 0 {
		return uids
	}
	return []uint32{0, uint32(os.Geteuid())}
}

func ownersText(uids []uint32) string {
	var s []string
	for _, u := range uids {
		if u == 0 {
			s = append(s, "root")
		} else {
			s = append(s, fmt.Sprintf("uid %d", u))
		}
	}
	return strings.Join(slices.Compact(s), " or ")
}

// CheckSocketTrusted returns an *UntrustedSocketError when the agent socket at path, its
// directory, or a directory or link on the way to it could have been put there by someone
// other than wantUIDs (default: root and this process's effective uid): the socket must be
// a socket (not a link) owned by one of them; its directory a directory (not a link) owned
// by one of them and not writable by group or others; every directory above it owned by one
// of them and not writable by group or others unless sticky (as /tmp); a link above it owned
// by one of them (its target is checked the same way). Nothing is followed without being
// checked first (lstat(2)). Other errors (the socket does not exist) are returned as they are.
//
// The CLI calls it before it sends anything to the socket; the agent checks its directory
// (CheckSocketDirTrusted) before it serves.
func CheckSocketTrusted(path string, wantUIDs ...uint32) error {
	owners := trustedOwners(wantUIDs)
	path = filepath.Clean(path)
	if !filepath.IsAbs(path) {
		return fmt.Errorf("agent socket %q: want an absolute path", path)
	}
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	uid := ownerOf(st)
	bad := func(problem string) error {
		return &UntrustedSocketError{Socket: path, Path: path, UID: uid, Mode: st.Mode(), Problem: problem,
			Fix: fmt.Sprintf("do not use it: remove it (rm %s) and restart the agent, or run with --agent never", path)}
	}
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		return bad("is a symbolic link, not the agent's socket")
	case st.Mode().Type() != os.ModeSocket:
		return bad("is not a socket")
	case !slices.Contains(owners, uid):
		return bad(fmt.Sprintf("is owned by uid %d, not %s", uid, ownersText(owners)))
	}
	return checkDir(path, filepath.Dir(path), owners)
}

// CheckSocketDirTrusted is CheckSocketTrusted for the socket's directory dir and the path to
// it, without the socket: what the agent checks before it binds its socket in dir.
func CheckSocketDirTrusted(dir string, wantUIDs ...uint32) error {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("agent socket directory %q: want an absolute path", dir)
	}
	err := checkDir(dir, dir, trustedOwners(wantUIDs))
	var ue *UntrustedSocketError
	if errors.As(err, &ue) {
		ue.dirOnly = true
	}
	return err
}

// checkDir checks the socket's own directory, then the path to it.
func checkDir(socket, dir string, owners []uint32) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("agent socket %s: %w", socket, err)
	}
	uid := ownerOf(st)
	bad := func(problem, fix string) error {
		return &UntrustedSocketError{Socket: socket, Path: dir, UID: uid, Mode: st.Mode(), Problem: problem, Fix: fix}
	}
	fixDir := fmt.Sprintf("if you made it, make it root's and not writable by others (chown root %s; chmod go-w %s), or remove it and let the agent create it; or choose another socket", dir, dir)
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		return bad("is a symbolic link", fmt.Sprintf("make it a directory (rm %s; the agent creates it), or name the real path", dir))
	case !st.IsDir():
		return bad("is not a directory", fixDir)
	case !slices.Contains(owners, uid):
		return bad(fmt.Sprintf("is owned by uid %d, not %s", uid, ownersText(owners)), fixDir)
	case st.Mode().Perm()&0o022 != 0:
		return bad("is writable by group or others", fixDir)
	}
	return checkAbove(socket, filepath.Dir(dir), owners)
}

// checkAbove checks every directory and link from / down to dir: each owned by one of
// owners, no directory writable by group or others unless sticky; a link's target is
// checked in its place (40 links at most, as the kernel).
func checkAbove(socket, dir string, owners []uint32) error {
	todo := strings.Split(strings.TrimPrefix(dir, "/"), "/")
	cur, links := "/", 0
	check := func(p string, st os.FileInfo) error {
		uid := ownerOf(st)
		fix := fmt.Sprintf("make it root's and not writable by others (chown root %s; chmod go-w %s), or choose a socket elsewhere", p, p)
		switch {
		case !slices.Contains(owners, uid):
			return &UntrustedSocketError{Socket: socket, Path: p, UID: uid, Mode: st.Mode(), Fix: fix,
				Problem: fmt.Sprintf("is owned by uid %d, not %s", uid, ownersText(owners))}
		case st.IsDir() && st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0:
			return &UntrustedSocketError{Socket: socket, Path: p, UID: uid, Mode: st.Mode(), Fix: fix,
				Problem: "is writable by group or others (and not sticky)"}
		}
		return nil
	}
	st, err := os.Lstat(cur)
	if err != nil {
		return fmt.Errorf("agent socket %s: %w", socket, err)
	}
	if err := check(cur, st); err != nil {
		return err
	}
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		p := filepath.Join(cur, c)
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("agent socket %s: %w", socket, err)
		}
		if err := check(p, st); err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink == 0 {
			cur = p
			continue
		}
		if links++; links > 40 {
			return fmt.Errorf("agent socket %s: %s: %w", socket, p, syscall.ELOOP)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("agent socket %s: %w", socket, err)
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return nil
}

// ownerOf is a file's owner, from its lstat.
func ownerOf(st os.FileInfo) uint32 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Uid
	}
	return ^uint32(0)
}
