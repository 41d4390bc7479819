package virt

import (
	"context"
	"fmt"
	"strings"
	"time"

	"libvirt.org/go/libvirtxml"
)

// What libvirt's numbers mean to vgpu-host, for both adapters over libvirt: the cgo binding
// in the helper (virt/native) and the pure-Go client of libvirtd's socket (virt/direct). The
// numbers are libvirt's ABI (virterror.h, libvirt-domain.h), the same in every version.

// libvirt's virErrorNumber values that vgpu-host tells apart.
const (
	libvirtErrNoConnect        = 5  // VIR_ERR_NO_CONNECT
	libvirtErrInvalidConn      = 6  // VIR_ERR_INVALID_CONN
	libvirtErrNoDomain         = 42 // VIR_ERR_NO_DOMAIN
	libvirtErrNoStoragePool    = 49 // VIR_ERR_NO_STORAGE_POOL
	libvirtErrNoStorageVol     = 50 // VIR_ERR_NO_STORAGE_VOL
	libvirtErrOperationInvalid = 55 // VIR_ERR_OPERATION_INVALID
	libvirtErrStorageVolExist  = 90 // VIR_ERR_STORAGE_VOL_EXIST
)

// SwtpmHint is what to do when starting a domain with a TPM fails in swtpm_setup. The
// commonest cause on a fresh host: swtpm ran once as root (libvirtd started before
// swtpm-tools created its tss user) and left its local CA root-owned.
const SwtpmHint = `if that log says "Need read/write rights on /var/lib/swtpm-localca", run: chown -R tss:root /var/lib/swtpm-localca`

// WithSwtpmHint adds SwtpmHint to an error starting a domain that failed in swtpm_setup; any
// other error, or nil, is returned as it is. Both adapters' Start use it.
func WithSwtpmHint(err error) error {
	if err != nil && strings.Contains(err.Error(), "swtpm_setup") {
		return fmt.Errorf("%w (%s)", err, SwtpmHint)
	}
	return err
}

// LibvirtError is a failed libvirt call as vgpu-host reports it: what names the call (the
// object and the action), libvirt's message, and for the errors callers tell apart
// (ErrNoDomain, ErrNoVolume, ErrNoPool, ErrVolumeExists, ErrConnection) that sentinel,
// wrapped. code is libvirt's virErrorNumber; rpcFailed says the call failed in libvirt's RPC
// layer (the connection to libvirtd broke), which an otherwise unmapped code then means.
func LibvirtError(what string, code int, msg string, rpcFailed bool) error {
	var kind error
	switch code {
	case libvirtErrNoDomain:
		kind = ErrNoDomain
	case libvirtErrNoStorageVol:
		kind = ErrNoVolume
	case libvirtErrNoStoragePool:
		kind = ErrNoPool
	case libvirtErrStorageVolExist:
		kind = ErrVolumeExists
	case libvirtErrNoConnect, libvirtErrInvalidConn:
		kind = ErrConnection
	default:
		if !rpcFailed {
			return fmt.Errorf("%s: %s", what, msg)
		}
		kind = ErrConnection
	}
	return fmt.Errorf("%s: %w: %s", what, kind, msg)
}

// StateOf maps libvirt's virDomainState to State.
func StateOf(s int) State {
	switch s {
	case 1, 2: // VIR_DOMAIN_RUNNING, VIR_DOMAIN_BLOCKED
		return StateRunning
	case 5: // VIR_DOMAIN_SHUTOFF
		return StateShutoff
	case 3, 7: // VIR_DOMAIN_PAUSED, VIR_DOMAIN_PMSUSPENDED
		return StatePaused
	case 4: // VIR_DOMAIN_SHUTDOWN
		return StateShutdown
	case 6: // VIR_DOMAIN_CRASHED
		return StateCrashed
	}
	return StateOther
}

// VolumeXML renders the libvirt <volume> for v.
func VolumeXML(v Volume) (string, error) {
	vol := &libvirtxml.StorageVolume{
		Name:     v.Name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: v.Capacity},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: v.Format}},
	}
	if v.BackingPath != "" {
		vol.BackingStore = &libvirtxml.StorageVolumeBackingStore{
			Path:   v.BackingPath,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: v.BackingFormat},
		}
	}
	return vol.Marshal()
}

// DirPoolXML renders the libvirt <pool> of a directory pool named name at path.
func DirPoolXML(name, path string) (string, error) {
	x, err := (&libvirtxml.StoragePool{Type: "dir", Name: name, Target: &libvirtxml.StoragePoolTarget{Path: path}}).Marshal()
	if err != nil {
		return "", fmt.Errorf("storage pool %s XML: %w", name, err)
	}
	return x, nil
}

// DeleteAllocating calls del until it succeeds, fails for another reason than libvirt's
// "volume is still being allocated" (its creator was killed mid-call and libvirtd finishes the
// job: VIR_ERR_OPERATION_INVALID, which code and msg of del's error tell), ctx ends, or a
// minute has passed. It returns del's last error, or ctx's.
func DeleteAllocating(ctx context.Context, del func() (code int, msg string, err error)) error {
	deadline := time.Now().Add(time.Minute)
	for {
		code, msg, err := del()
		if err == nil || code != libvirtErrOperationInvalid || !strings.Contains(msg, "being allocated") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
