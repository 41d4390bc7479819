package clitree

import (
	"errors"
	"fmt"
	"io"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// agentSocketRefusal is what forward does when the agent's Client refused the socket itself
// rather than the agent refusing the command: ok is false for any other error. An untrusted
// socket (agentapi.UntrustedSocketError: someone other than root or the caller could have put
// it there) never receives the command: with --agent always it is exit 4 naming the file and
// the fix; in auto mode the command runs in-process after a warning, since the caller did not
// ask for the agent. A socket whose mode keeps the caller out (agentapi.SocketPermissionError)
// is exit 4 with --agent always, saying so and how to get in; in auto mode the command runs
// in-process, as it does when no agent answers.
func agentSocketRefusal(err error, mode string, stderr io.Writer) (code int, done, ok bool) {
	var ue *agentapi.UntrustedSocketError
	var pe *agentapi.SocketPermissionError
	switch {
	case errors.As(err, &ue) && mode == agentAuto:
		fmt.Fprintf(stderr, "vgpu-host: warning: not using the agent, running in-process: %v\n", err)
		return 0, false, true
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "vgpu-host: --agent %s: %v\n", mode, err)
		return exitRefused, true, true
	case errors.As(err, &pe) && mode == agentAuto:
		return 0, false, true
	case errors.As(err, &pe):
		fmt.Fprintf(stderr, "vgpu-host: --agent %s: %v\n", mode, err)
		return exitRefused, true, true
	}
	return 0, false, false
}
