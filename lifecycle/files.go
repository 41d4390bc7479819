package lifecycle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// QEMUUsers are the accounts libvirt runs QEMU as, tried in order: Debian's, then Fedora's.
var QEMUUsers = []string{"libvirt-qemu", "qemu"}

// SpecFile is a file a VM needs to exist before its domain is defined.
type SpecFile struct {
	// Field is the spec path that names it ("spec.disks[1].path").
	Field string
	Path  string
	// Device is true for device nodes (evdev): existence only, libvirt grants access itself.
	Device bool
}

// SpecFiles lists the files vm uses that must exist already: plain disks, pool volumes and
// the base images of overlays, CD-ROM images, the virtio-win ISO, ROM files and evdev devices.
// Files apply creates (overlays, blank disks, the seed) are not in it.
func SpecFiles(vm *domains.VM, opts domains.BuildOptions) []SpecFile {
	return specFiles(vm, vm.DiskFiles(opts))
}

// specFiles is SpecFiles with the disk files listed already (the allocation's).
func specFiles(vm *domains.VM, disks []domains.DiskFile) []SpecFile {
	var out []SpecFile
	for i, f := range disks {
		p := fmt.Sprintf("spec.disks[%d]", i)
		switch dk := vm.Spec.Disks[i]; {
		case f.Create && f.Backing != "":
			out = append(out, SpecFile{Field: p + ".image", Path: f.Backing})
		case dk.Volume != "":
			out = append(out, SpecFile{Field: p + ".volume", Path: f.Path})
		case f.URL != "": // apply downloads it
		case !f.Create:
			out = append(out, SpecFile{Field: p + ".path", Path: f.Path})
		}
	}
	if vm.Spec.VirtioWin != "" {
		out = append(out, SpecFile{Field: "spec.virtioWin", Path: vm.Spec.VirtioWin})
	}
	for i, g := range vm.Spec.GPUs {
		if g.Passthrough != nil && g.Passthrough.ROM != nil && g.Passthrough.ROM.File != "" {
			out = append(out, SpecFile{Field: fmt.Sprintf("spec.gpus[%d].passthrough.rom.file", i), Path: g.Passthrough.ROM.File})
		}
	}
	for i, e := range vm.Spec.Devices.Evdev {
		out = append(out, SpecFile{Field: fmt.Sprintf("spec.devices.evdev[%d].path", i), Path: e.Path, Device: true})
	}
	return out
}

// qemuAccount is the uid and groups QEMU runs with.
type qemuAccount struct {
	name   string
	uid    int
	groups []int
}

// lookupQEMU finds the first of names on this machine; nil when there is none.
func lookupQEMU(names []string) *qemuAccount {
	for _, n := range names {
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		a := &qemuAccount{name: n}
		a.uid, _ = strconv.Atoi(u.Uid)
		gids, _ := u.GroupIds()
		if !slices.Contains(gids, u.Gid) {
			gids = append(gids, u.Gid)
		}
		for _, g := range gids {
			if id, err := strconv.Atoi(g); err == nil {
				a.groups = append(a.groups, id)
			}
		}
		return a
	}
	return nil
}

// CheckSpecFiles checks, before anything changes, that every file of files exists (else an
// error wrapping host.ErrNotFound, exit 6) and that the QEMU user (the first of users that
// exists here) can reach and read it (else a plain error, exit 1), naming the spec field, the
// path and the chmod or setfacl that fixes it. libvirt's dynamic ownership chowns disk images
// (not their directories) to the QEMU user at start, so a file's own mode is only reported
// when no directory is the problem and the file is not readable; a directory the QEMU user
// cannot search is always fatal. Device nodes are checked for existence only.
func CheckSpecFiles(files []SpecFile, users []string) error {
	acct := lookupQEMU(users)
	var errs []error
	for _, f := range files {
		st, err := os.Stat(f.Path)
		if errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s: %s does not exist: correct the path or put the file there: %w", f.Field, f.Path, host.ErrNotFound))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.Field, err))
			continue
		}
		if f.Device || acct == nil {
			continue
		}
		if dir := unsearchableDir(f.Path, acct); dir != "" {
			errs = append(errs, fmt.Errorf("%s: the QEMU user %s cannot reach %s: it may not enter the directory %s; fix: chmod o+x %s, or setfacl -m u:%s:x %s, or move the file to %s",
				f.Field, acct.name, f.Path, dir, dir, acct.name, dir, domains.DefaultImagesDir))
			continue
		}
		if st.Mode().IsRegular() && !acct.may(f.Path, st, 4) {
			errs = append(errs, fmt.Errorf("%s: the QEMU user %s cannot read %s (mode %v); fix: chmod o+r %s, or setfacl -m u:%s:r %s",
				f.Field, acct.name, f.Path, st.Mode().Perm(), f.Path, acct.name, f.Path))
		}
	}
	return errors.Join(errs...)
}

// unsearchableDir returns the first directory above path the account may not enter.
func unsearchableDir(path string, a *qemuAccount) string {
	var dirs []string
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == "/" || d == "." {
			break
		}
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil {
			return d
		}
		if !a.may(d, st, 1) {
			return d
		}
	}
	return ""
}

// may reports whether the account has permission bit want (4 read, 1 execute/search) on a
// file: its owner, group and other bits, or its POSIX ACL when it has one.
func (a *qemuAccount) may(path string, st fs.FileInfo, want uint32) bool {
	if a.uid == 0 {
		return true
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	if acl, ok := readACL(path); ok {
		return acl.allows(a, sys, want)
	}
	mode := uint32(st.Mode().Perm())
	switch {
	case int(sys.Uid) == a.uid:
		return mode>>6&want != 0
	case slices.Contains(a.groups, int(sys.Gid)):
		return mode>>3&want != 0
	}
	return mode&want != 0
}

// aclEntry is one entry of a Linux POSIX ACL (system.posix_acl_access, version 2).
type aclEntry struct {
	tag, perm uint16
	id        uint32
}

type posixACL []aclEntry

const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
)

// readACL reads path's access ACL; false when it has none (the mode bits say everything).
func readACL(path string) (posixACL, bool) {
	buf := make([]byte, 4+8*64)
	n, err := syscall.Getxattr(path, "system.posix_acl_access", buf)
	if err != nil || n < 4 || (n-4)%8 != 0 || buf[0] != 2 {
		return nil, false
	}
	var acl posixACL
	for i := 4; i+8 <= n; i += 8 {
		b := buf[i : i+8]
		acl = append(acl, aclEntry{
			tag:  uint16(b[0]) | uint16(b[1])<<8,
			perm: uint16(b[2]) | uint16(b[3])<<8,
			id:   uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24,
		})
	}
	return acl, true
}

// allows applies the POSIX ACL check algorithm (acl(5)).
func (acl posixACL) allows(a *qemuAccount, st *syscall.Stat_t, want uint32) bool {
	mask := uint16(7)
	for _, e := range acl {
		if e.tag == aclMask {
			mask = e.perm
		}
	}
	w := uint16(want)
	for _, e := range acl {
		if e.tag == aclUserObj && int(st.Uid) == a.uid {
			return e.perm&w != 0
		}
	}
	for _, e := range acl {
		if e.tag == aclUser && int(e.id) == a.uid {
			return e.perm&mask&w != 0
		}
	}
	group, matched := false, false
	for _, e := range acl {
		if (e.tag == aclGroupObj && slices.Contains(a.groups, int(st.Gid))) || (e.tag == aclGroup && slices.Contains(a.groups, int(e.id))) {
			matched = true
			group = group || e.perm&mask&w != 0
		}
	}
	if matched {
		return group
	}
	for _, e := range acl {
		if e.tag == aclOther {
			return e.perm&w != 0
		}
	}
	return false
}
