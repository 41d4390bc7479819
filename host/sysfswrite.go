package host

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// writeAttr is SysfsWriter's open, write and close of one attribute. On the real root it uses
// the file descriptor directly: an os.File would first register a sysfs attribute with the
// runtime's poller (two fcntl and an epoll_ctl at open, another at close), four system calls
// around each write that cost more than the write itself under TCG (issue 19: the lab's mdev
// create/remove of 16 instances makes 32 writes). Under another root the path is resolved
// inside it (OpenInRoot).
func writeAttr(root Root, path, value string) error {
	if !root.IsReal() {
		f, err := root.openIn(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = io.WriteString(f, value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	// As os.File.Write: the rest of a short write is written again (a sysfs store normally
	// takes the whole value in one call).
	b := []byte(value)
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		if n == 0 {
			unix.Close(fd)
			return &os.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
		}
		b = b[n:]
	}
	if err := unix.Close(fd); err != nil {
		return &os.PathError{Op: "close", Path: path, Err: err}
	}
	return nil
}
