package remote

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/vgpu-host/vgpu-host/host"
)

// trustedHelper accepts the helper named by $VGPU_HOST_LIBVIRT_HELPER only when root (or the
// user running vgpu-host) owns it and nobody else can change it: the file and its directory are
// owned by root or the invoking user, and neither is writable by group or others (a directory
// with the sticky bit, such as /tmp, may be: others cannot replace a file they do not own in
// it). vgpu-host runs as root, so without this check the variable would make root run
// whatever another user put in a file they can write. Errors say what is wrong and wrap
// host.ErrRefused.
func trustedHelper(p string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return fmt.Errorf("%s=%s: %w", EnvHelper, p, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("%s=%s: %w", EnvHelper, p, err)
	}
	uid := os.Getuid()
	for _, c := range []struct {
		path string
		dir  bool
	}{{real, false}, {filepath.Dir(real), true}} {
		st, err := os.Stat(c.path)
		if err != nil {
			return fmt.Errorf("%s=%s: %w", EnvHelper, p, err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s=%s: cannot read the owner of %s: %w", EnvHelper, p, c.path, host.ErrRefused)
		}
		if owner := int(sys.Uid); owner != 0 && owner != uid {
			return fmt.Errorf("%s=%s: refusing to run it: %s is owned by uid %d, not by root or by you (uid %d); chown it or unset %s: %w",
				EnvHelper, p, c.path, owner, uid, EnvHelper, host.ErrRefused)
		}
		if mode := st.Mode(); mode.Perm()&0o022 != 0 && !(c.dir && mode&os.ModeSticky != 0) {
			return fmt.Errorf("%s=%s: refusing to run it: %s is writable by group or others (mode %04o), so anyone could change what root runs; chmod go-w it or unset %s: %w",
				EnvHelper, p, c.path, mode.Perm(), EnvHelper, host.ErrRefused)
		}
	}
	return nil
}
