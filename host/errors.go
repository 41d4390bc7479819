package host

import "errors"

// Sentinel errors shared by every package. Wrap them with context (device, path, fix) and test
// with errors.Is; the CLI maps them to documented exit codes.
var (
	// ErrNotFound: a device, group, type, instance or VM that was named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrRefused: a safety check refused the operation; --force overrides it.
	ErrRefused = errors.New("refused by a safety check (use --force to override)")
	// ErrBusy: the device or resource is in use (held open, allocated to another VM, EBUSY).
	ErrBusy = errors.New("busy")
	// ErrUnsupported: the host, driver or device cannot do what was asked (no IOMMU, no SR-IOV).
	ErrUnsupported = errors.New("not supported on this host")
	// ErrInvalid: bad input (a malformed address, spec or flag value).
	ErrInvalid = errors.New("invalid input")
	// ErrNotReady: the host is not ready for what was asked (check found nothing assignable).
	ErrNotReady = errors.New("host not ready")
)
