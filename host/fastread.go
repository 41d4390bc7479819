package host

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"
)

// readAttr reads a small sysfs attribute with bare open/read/close. os.ReadFile costs about
// twice the syscalls per file (fstat, fcntl and a netpoller registration that fails for
// regular files); Scan reads one attribute per PCI function, so on a 2,000-function host this
// is most of its system time. Errors are those of ReadString: they name the path and satisfy
// errors.Is(err, fs.ErrNotExist) for a missing file.
func readAttr(path string) (string, error) {
	return readAttrAt(atCWD, "", path, "")
}

// atCWD is AT_FDCWD: openat with it resolves a relative path from the working directory and an
// absolute one as is, so readAttr is readAttrAt(atCWD, "", path, "").
const atCWD = -0x64

// readAttrAt reads the attribute NAME/ATTR (NAME alone when attr is "") relative to the open
// directory dirfd (openat); errors name the full path, dir being the directory dirfd has
// open. Scan reads one attribute of every PCI function: opening "ADDR/class" from the devices
// directory spares the kernel walking ROOT/sys/bus/pci/devices again each time, and a short
// path goes to the kernel from a stack buffer, without an allocation.
func readAttrAt(dirfd int, dir, name, attr string) (string, error) {
	pathOf := func() string {
		if attr == "" {
			return filepath.Join(dir, name)
		}
		return filepath.Join(dir, name, attr)
	}
	var pathBuf [256]byte
	var p *byte
	if want := len(name) + len(attr) + min(len(attr), 1); want < len(pathBuf) {
		n := copy(pathBuf[:], name)
		if attr != "" {
			n += copy(pathBuf[n:], "/")
			n += copy(pathBuf[n:], attr)
		}
		if bytes.IndexByte(pathBuf[:n], 0) >= 0 {
			return "", fmt.Errorf("read %s: path has a NUL byte: %w", pathOf(), syscall.EINVAL)
		}
		p = &pathBuf[0] // the rest of pathBuf is zero: NUL-terminated
	} else {
		var err error
		rel := name
		if attr != "" {
			rel = name + "/" + attr
		}
		if p, err = syscall.BytePtrFromString(rel); err != nil {
			return "", fmt.Errorf("read %s: %w", pathOf(), err)
		}
	}
	// Raw syscalls: a sysfs attribute read does not block on I/O, and Scan has no other
	// goroutine to run meanwhile. syscall.Syscall's entersyscall/exitsyscall let the runtime's
	// sysmon hand the P to another thread whenever one of ~3,000 calls takes over 20 µs, which
	// on a busy machine costs more futex wake-ups than the reads themselves.
	var fd uintptr
	var e syscall.Errno
	for {
		fd, _, e = syscall.RawSyscall6(syscall.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
			uintptr(syscall.O_RDONLY|syscall.O_CLOEXEC), 0, 0, 0)
		if e != syscall.EINTR {
			break
		}
	}
	if e != 0 {
		return "", fmt.Errorf("read %s: %w", pathOf(), e)
	}
	defer syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	var buf [4096]byte
	n := 0
	for n < len(buf) {
		m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[n])), uintptr(len(buf)-n))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return "", fmt.Errorf("read %s: %w", pathOf(), e)
		}
		n += int(m)
		if m == 0 || n < len(buf) {
			break // a short read is the end of a sysfs attribute or a small file
		}
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// readHexAttr is ReadHex over readAttr.
func readHexAttr(path string) (uint32, error) {
	s, err := readAttr(path)
	if err != nil {
		return 0, err
	}
	return parseHex(path, s)
}

// readIntAttr is ReadInt over readAttr.
func readIntAttr(path string) (int64, error) {
	s, err := readAttr(path)
	if err != nil {
		return 0, err
	}
	return parseInt(path, s)
}

// readClassAt is readHexAttr over readAttrAt: the 24-bit class of PCI function name, a
// directory under dirfd's dir.
func readClassAt(dirfd int, dir, name string) (uint32, error) {
	s, err := readAttrAt(dirfd, dir, name, "class")
	if err != nil {
		return 0, err
	}
	return parseHex(filepath.Join(dir, name, "class"), s)
}
