package host

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// readAttr reads a small sysfs attribute with bare open/read/close. os.ReadFile costs about
// twice the syscalls per file (fstat, fcntl and a netpoller registration that fails for
// regular files); Scan reads one attribute per PCI function, so on a 2,000-function host this
// is most of its system time. Errors are those of ReadString: they name the path and satisfy
// errors.Is(err, fs.ErrNotExist) for a missing file.
func readAttr(path string) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for err == syscall.EINTR {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer syscall.Close(fd)
	var buf [4096]byte
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		n += m
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
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("read %s: not a hex number: %q", path, s)
	}
	return uint32(v), nil
}

// readIntAttr is ReadInt over readAttr.
func readIntAttr(path string) (int64, error) {
	s, err := readAttr(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: not an integer: %q", path, s)
	}
	return v, nil
}
