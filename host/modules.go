package host

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// ModuleLoader loads kernel modules (vfio-pci before a bind, for instance).
type ModuleLoader interface {
	Load(ctx context.Context, module string) error
}

// Modprobe loads modules with modprobe(8), but only on the real root: under another
// --host-root there is no kernel to load into, and loading into this machine's kernel would
// change the real host, so it refuses and names the fix.
type Modprobe struct {
	Root Root
}

// Load runs `modprobe MODULE` when the root is the real host.
func (m Modprobe) Load(ctx context.Context, module string) error {
	if !m.Root.IsReal() {
		return fmt.Errorf("load module %s: %w under --host-root %s (load it in that host's kernel)", module, ErrUnsupported, m.Root.Dir())
	}
	out, err := exec.CommandContext(ctx, "modprobe", "--", module).CombinedOutput()
	if err != nil {
		return fmt.Errorf("load module %s: modprobe: %v: %s", module, err, strings.TrimSpace(string(out)))
	}
	return nil
}
