package host

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
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
// directory spares the kernel walking ROOT/sys/bus/pci/devices again each time.
//
// An earlier version issued raw syscalls from a stack buffer through package unsafe; on this
// project's 2-core machine the difference to syscall.Openat/Read was inside the noise of the
// 2,000-function benchmark (go test ./host -bench Scan), so the safe calls stay.
func readAttrAt(dirfd int, dir, name, attr string) (string, error) {
	v, err := readAttrRaw(dirfd, name, attr)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", filepath.Join(dir, joinRel(name, attr)), err)
	}
	return v, nil
}

// readAttrRaw is readAttrAt with the bare error of open(2) or read(2) (a syscall.Errno), for
// callers that build their message only when they report it: an optional attribute that is
// absent (sriov_totalvfs on a function without SR-IOV, reset_method before Linux 5.15) is no
// error to them, and formatting one was two allocations each.
func readAttrRaw(dirfd int, name, attr string) (string, error) {
	var buf [4096]byte
	b, err := readAttrInto(dirfd, name, attr, &buf)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// readAttrInto is readAttrRaw reading into buf and returning the trimmed bytes there, for a
// caller that parses them (a number) or compares them ("(null)") and keeps no string.
func readAttrInto(dirfd int, name, attr string, buf *[4096]byte) ([]byte, error) {
	fd, err := openatJoin(dirfd, name, attr, syscall.O_RDONLY|syscall.O_NONBLOCK) // a FIFO in a hostile tree never waits
	if err != nil {
		return nil, err
	}
	return readAttrFD(fd, buf)
}

// readAttrFD is readAttrInto of the attribute open at fd, which it closes.
func readAttrFD(fd int, buf *[4096]byte) ([]byte, error) {
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		n += m
		if m == 0 || n < len(buf) {
			break // a short read is the end of a sysfs attribute or a small file
		}
	}
	return bytes.TrimSpace(buf[:n]), nil
}

// atoiBytes is strconv.ParseInt(string(b), 0, 64) for what sysfs prints for a count or a
// node, an optional "-" and 1 to 18 decimal digits without a leading zero (or "0" itself),
// without the string; ok is false for anything else, which the caller parses as a string.
func atoiBytes(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || len(b) > 1 && b[0] == '0' {
		return 0, false // empty, too long, or octal/hex for base 0
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
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

// maxHostFile bounds a whole-file read of the host tree (ReadHostFile): the largest procfs
// files vgpu-host reads (/proc/interrupts, /proc/cpuinfo on a host of a thousand CPUs) are a
// few MB. maxAttrFile bounds the read of a PCI function's or mdev type's attribute
// (devDir.fileIn), which sysfs holds to a page. Past them the file is not what it claims to be
// (/dev/zero linked where an attribute belongs, in a hostile or broken tree), and reading on
// would take every byte of memory.
const (
	maxHostFile = 32 << 20
	maxAttrFile = 1 << 20
)

// tooLargeHostFile is the error for a host tree file past limit (a *fs.PathError, as the
// open's and read's).
func tooLargeHostFile(path string, limit int) error {
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("more than %d MiB, which no sysfs or procfs file holds (a device or a huge file linked where it belongs in the host tree?): %w",
		limit>>20, ErrTooLarge)}
}

// ReadHostFile reads a whole file of the host tree (sysfs, procfs, pci.ids) as os.ReadFile
// does, but opens it O_NONBLOCK and reads it with bare read(2), outside Go's poller: a FIFO
// where a file belongs, in a snapshot someone sent or a hostile fake tree, reads as empty (no
// writer) or fails with EAGAIN (a writer that writes nothing) instead of an open or a read that
// waits for ever. Regular files, sysfs and procfs ignore O_NONBLOCK. limit > 0 stops after
// that many bytes (config space's first 256); without one, a file past maxHostFile is an
// error (ErrTooLarge) instead of a read that never ends. Errors are *fs.PathError naming
// path, so errors.Is(err, fs.ErrNotExist) works.
func ReadHostFile(path string, limit int) ([]byte, error) {
	fd, err := openat(atCWD, path, syscall.O_RDONLY|syscall.O_NONBLOCK)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return readHostFD(fd, path, limit)
}

// readHostFD is ReadHostFile of the file open at fd (path for errors), which it closes.
func readHostFD(fd int, path string, limit int) ([]byte, error) {
	defer syscall.Close(fd)
	size := 4096
	if limit > 0 && limit < size {
		size = limit
	}
	b := make([]byte, 0, size)
	for limit <= 0 || len(b) < limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		space := b[len(b):cap(b)]
		if limit > 0 && len(space) > limit-len(b) {
			space = space[:limit-len(b)]
		}
		n, err := syscall.Read(fd, space)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
		if limit <= 0 && len(b) > maxHostFile {
			return nil, tooLargeHostFile(path, maxHostFile)
		}
	}
	return b, nil
}

// openHostFile opens a file of the host tree for reading with O_NONBLOCK, for a caller that
// scans or maps it (/proc/mounts, pci.ids): opening a FIFO where the file belongs then returns
// at once, and reading it without a writer ends at once.
func openHostFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// maxQuoted is how much of a file's content an error quotes.
const maxQuoted = 80

// quoted is s as %q quotes it, cut to its first maxQuoted bytes with how long it was when it is
// longer: an error about a malformed attribute quotes what was read, and a hostile tree's
// "attribute" of a page of NUL bytes (or of /dev/zero's 32 MiB) made one line of 16 KB.
func quoted(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:maxQuoted]) + fmt.Sprintf("… (%d bytes)", len(s))
}
