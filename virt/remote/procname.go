package remote

import (
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// commLen is the longest process name the kernel keeps (TASK_COMM_LEN less the NUL).
const commLen = 15

// NameProcess names a process that Command or Exec started through /proc/self/fd/N after
// argv[0]'s base name (cut to 15 bytes, as the kernel cuts every name): the kernel names such
// a process after the descriptor, "3", and that is what ps, top, pgrep, systemd and
// /proc/PID/comm show, and what vgpu-host's own holder refusals printed ("pid 518 (3) has
// /dev/nvidia0 open", the agent's NVML helper on a real H200, 2026-11-27). A process whose
// name is not a number (started by its path) keeps it.
//
// The name is the calling thread's, and /proc/PID/comm shows the main thread's: call it from
// an init function of the helper's main package, which runs on the main thread.
func NameProcess() {
	var cur [commLen + 1]byte
	if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&cur[0])), 0, 0, 0); err != nil {
		return
	}
	if !fdName(unix.ByteSliceToString(cur[:])) || len(os.Args) == 0 {
		return
	}
	name := filepath.Base(os.Args[0])
	if len(name) > commLen {
		name = name[:commLen]
	}
	b, err := unix.BytePtrFromString(name)
	if err != nil {
		return
	}
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
}

// fdName reports whether a process name is a descriptor's number: the name the kernel gives a
// program run as /proc/self/fd/N.
func fdName(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
