package host

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
)

// ReadSRIOV reads the SR-IOV attributes of the PF at addr (see SRIOV): nil and no error when
// the device has no SR-IOV capability (no sriov_totalvfs), an error satisfying
// errors.Is(err, ErrNotFound) when the device does not exist. Problems with the optional
// attributes (sriov_numvfs unreadable, a dangling virtfn link) are returned as warnings naming
// the device and the path.
func ReadSRIOV(root Root, addr Address) (*SRIOV, []string, error) {
	dir := root.PCIDevice(addr)
	if _, err := root.Lstat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("SR-IOV of %s: no %s: %w", addr, dir, ErrNotFound)
		}
		return nil, nil, fmt.Errorf("SR-IOV of %s: %w", addr, err)
	}
	s := newScanner(root)
	dd := root.devDir(dir)
	defer dd.close()
	sr := s.readSRIOV(addr, dd)
	return sr, s.warnings, nil
}

// readSRIOV reads a PF's SR-IOV attributes; nil when the device has no SR-IOV capability.
//
//	sriov_totalvfs 3, sriov_numvfs 3, sriov_offset 1, sriov_stride 1, virtfn0 -> ../0000:00:0a.1
func (s *scanner) readSRIOV(addr Address, dd devDir) *SRIOV {
	// Most functions have no SR-IOV capability: their missing file builds no error (strRaw).
	ts, err := dd.strRaw("sriov_totalvfs")
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn("%s: %v", addr, dd.attrErr("sriov_totalvfs", err))
		}
		return nil
	}
	total, err := parseIntLazy(func() string { return dd.path("sriov_totalvfs") }, ts)
	if err != nil {
		s.warn("%s: %v", addr, err)
		return nil
	}
	sr := &SRIOV{TotalVFs: int(total), VFs: []Address{}}
	if n, err := dd.int("sriov_numvfs"); err == nil {
		sr.NumVFs = int(n)
	} else {
		s.warn("%s: %v", addr, err)
	}
	if ap, err := dd.int("sriov_drivers_autoprobe"); err == nil {
		v := ap != 0
		sr.DriversAutoprobe = &v
	}
	for _, f := range []struct {
		name string
		to   *int
	}{{"sriov_offset", &sr.Offset}, {"sriov_stride", &sr.Stride}} {
		if v, err := dd.int(f.name); err == nil {
			*f.to = int(v)
		} else if !errors.Is(err, fs.ErrNotExist) {
			s.warn("%s: %v", addr, err)
		}
	}
	for i := 0; i < sr.NumVFs; i++ {
		a, err := virtfn(dd, i)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				s.warn("%s: sriov_numvfs is %d but %v", addr, sr.NumVFs, err)
			} else {
				s.warn("%s: %v", addr, err)
			}
			continue
		}
		sr.VFs = append(sr.VFs, a)
	}
	if s.pfOf != nil {
		s.mu.Lock()
		for _, vf := range sr.VFs {
			s.pfOf[vf] = addr
		}
		s.mu.Unlock()
	}
	return sr
}

// virtfn reads the PF's link virtfnI (in the PF's directory dd) and returns the VF's address.
func virtfn(dd devDir, i int) (Address, error) {
	link := "virtfn" + strconv.Itoa(i)
	name, err := dd.linkBase(link)
	if err != nil {
		return Address{}, err
	}
	a, err := ParseAddress(name)
	if err != nil {
		return Address{}, fmt.Errorf("%s names %q: %w", dd.path(link), name, err)
	}
	return a, nil
}

// ReadVFs returns the VFs the PF at addr has right now, from its virtfn0, virtfn1... links up
// to the first one missing, whatever sriov_numvfs says: the kernel adds the links after a
// sriov_numvfs write returns, so this is what a caller polls to see them appear or go. A PF
// without VFs (or without SR-IOV) returns an empty list.
func ReadVFs(root Root, addr Address) ([]Address, error) {
	dd := root.devDir(root.PCIDevice(addr))
	defer dd.close()
	out := []Address{}
	for i := 0; ; i++ {
		a, err := virtfn(dd, i)
		if errors.Is(err, fs.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("VFs of %s: %w", addr, err)
		}
		out = append(out, a)
	}
}

// VFAddresses computes the addresses of the PF's first n VFs from Offset and Stride as the
// kernel does (routing ID = the PF's + Offset + i*Stride), so a dry run can name VFs that do
// not exist yet. It fails when the kernel did not show sriov_offset (Offset 0).
func (s *SRIOV) VFAddresses(pf Address, n int) ([]Address, error) {
	if s == nil || s.Offset == 0 {
		return nil, fmt.Errorf("VF addresses of %s: no sriov_offset: %w", pf, ErrUnsupported)
	}
	rid := int(pf.Bus)<<8 | int(pf.Device)<<3 | int(pf.Function)
	out := make([]Address, n)
	for i := range out {
		r := rid + s.Offset + i*s.Stride
		out[i] = Address{Domain: pf.Domain, Bus: uint8(r >> 8), Device: uint8(r>>3) & 0x1f, Function: uint8(r & 7)}
	}
	return out, nil
}
