package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/vgpu-host/vgpu-host/host"
)

type peerKey struct{}

// PeerOf returns the peer stored in ctx by the server, and whether there is one.
func PeerOf(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// peerCred asks the kernel for the credentials of c's peer.
func peerCred(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("peer credentials: %T is not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return Peer{}, fmt.Errorf("peer credentials (SO_PEERCRED): %w", cerr)
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// authorize says whether p may run a command of class c: reads are open to whoever can
// connect; mutations need uid 0 or membership (primary or supplementary, read from the
// peer's /proc/PID/status under procRoot) of group gid (-1: no group, root only); a
// RootMutation needs uid 0. The error says who asked and what is needed.
func authorize(p Peer, c Class, gid int, groupName string, procRoot host.Root) error {
	if c == Read || p.UID == 0 {
		return nil
	}
	need := "root"
	if c == Mutation && gid >= 0 {
		need = fmt.Sprintf("root or membership of group %s (gid %d)", groupName, gid)
		if int(p.GID) == gid {
			return nil
		}
		if gs, err := host.ProcessGroups(procRoot, int(p.PID)); err == nil && slices.Contains(gs, gid) {
			return nil
		}
	}
	what := "changing the host"
	if c == RootMutation {
		what = "this command (it writes or runs a path as root)"
	}
	return fmt.Errorf("%w: uid %d (pid %d) may not run %s through the agent: it needs %s", ErrPermission, p.UID, p.PID, what, need)
}

// ErrPermission is a caller's refusal: HTTP 403, exit 4 in the CLI.
var ErrPermission = errors.New("permission denied")
