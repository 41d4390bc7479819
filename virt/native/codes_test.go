package native

import (
	"errors"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/vgpu-host/vgpu-host/virt"
)

// TestCodesAreLibvirts: the numbers virt.StateOf and virt.LibvirtError know are the binding's
// own constants (libvirt's ABI), so both adapters read libvirt's answers the same way.
func TestCodesAreLibvirts(t *testing.T) {
	for s, want := range map[libvirt.DomainState]virt.State{
		libvirt.DOMAIN_NOSTATE:     virt.StateOther,
		libvirt.DOMAIN_RUNNING:     virt.StateRunning,
		libvirt.DOMAIN_BLOCKED:     virt.StateRunning,
		libvirt.DOMAIN_PAUSED:      virt.StatePaused,
		libvirt.DOMAIN_SHUTDOWN:    virt.StateShutdown,
		libvirt.DOMAIN_SHUTOFF:     virt.StateShutoff,
		libvirt.DOMAIN_CRASHED:     virt.StateCrashed,
		libvirt.DOMAIN_PMSUSPENDED: virt.StatePaused,
	} {
		if got := virt.StateOf(int(s)); got != want {
			t.Errorf("StateOf(%d) = %s, want %s", s, got, want)
		}
	}
	for code, want := range map[libvirt.ErrorNumber]error{
		libvirt.ERR_NO_DOMAIN:         virt.ErrNoDomain,
		libvirt.ERR_NO_STORAGE_POOL:   virt.ErrNoPool,
		libvirt.ERR_NO_STORAGE_VOL:    virt.ErrNoVolume,
		libvirt.ERR_STORAGE_VOL_EXIST: virt.ErrVolumeExists,
		libvirt.ERR_NO_CONNECT:        virt.ErrConnection,
		libvirt.ERR_INVALID_CONN:      virt.ErrConnection,
	} {
		if err := lverr(libvirt.Error{Code: code, Message: "m"}, "call"); !errors.Is(err, want) {
			t.Errorf("libvirt error %d: %v, want %v", code, err, want)
		}
	}
	if err := lverr(libvirt.Error{Code: libvirt.ERR_OPERATION_INVALID, Domain: libvirt.FROM_RPC, Message: "client socket is closed"}, "call"); !errors.Is(err, virt.ErrConnection) {
		t.Errorf("an RPC failure: %v, want virt.ErrConnection", err)
	}
	err := lverr(libvirt.Error{Code: libvirt.ERR_XML_DETAIL, Domain: libvirt.FROM_DOMAIN, Message: "bad XML"}, "define domain")
	if err.Error() != "define domain: bad XML" || errors.Is(err, virt.ErrConnection) || virt.IsNotFound(err) {
		t.Errorf("an ordinary refusal: %v", err)
	}
}
