package ops

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/ledger"
	"github.com/vgpu-host/vgpu-host/mdev"
)

// LazyLibvirt is mdev remove's DomainUsers: it connects on first use, so commands that never
// remove anything never need libvirtd. An unreachable libvirtd makes the check fail, and
// Remove then decides by the kernel (who holds /dev/vfio/N) and the allocation ledger alone.
type LazyLibvirt struct {
	// Open connects; it returns the connection and its close.
	Open  func() (mdev.DomainXMLLister, func(), error)
	once  sync.Once
	users mdev.LibvirtUsers
	close func()
	err   error
}

// DomainsUsing lists the libvirt domains that use in, connecting first if it has not.
func (l *LazyLibvirt) DomainsUsing(ctx context.Context, in mdev.Instance) ([]string, error) {
	l.once.Do(func() {
		c, closeFn, err := l.Open()
		if err != nil {
			l.err = fmt.Errorf("libvirtd is unreachable, so vgpu-host cannot tell which domains use %s: %w", in.ID(), err)
			return
		}
		l.users, l.close = mdev.LibvirtUsers{Conn: c}, closeFn
	})
	if l.err != nil {
		return nil, l.err
	}
	return l.users.DomainsUsing(ctx, in)
}

// Close closes the connection, if DomainsUsing opened one.
func (l *LazyLibvirt) Close() {
	if l.close != nil {
		l.close()
	}
}

// MdevManager builds the mdev.Manager of an operation on env: env's host writer, or with
// dryRun a Recorder (returned, for the dry run's report) that changes nothing; each sysfs
// write and wait bounded by timeout (mdev's default when not positive); the allocation
// ledger's holders; and on the real root the libvirt in-use check, through env.OpenConn on
// first use. done closes that connection.
func MdevManager(env Env, timeout time.Duration, dryRun bool) (m *mdev.Manager, rec *host.Recorder, done func()) {
	w, _ := env.HostIO()
	m = mdev.New(env.Root, w)
	if timeout > 0 {
		m.Timeout = timeout
	}
	if dryRun {
		rec = &host.Recorder{}
		m.W, m.DryRun = rec, true
	}
	m.Allocated = ledgerHolder(env.Root)
	done = func() {}
	if env.Root.IsReal() {
		l := env.lazyLibvirt()
		m.Domains = l
		done = l.Close
	}
	return m, rec, done
}

// lazyLibvirt is env's libvirt as mdev asks it which domains use an instance: opened on the
// first question, closed by its Close.
func (env Env) lazyLibvirt() *LazyLibvirt {
	return &LazyLibvirt{Open: func() (mdev.DomainXMLLister, func(), error) {
		c, err := env.OpenConn()
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}}
}

// ledgerHolder returns the check mdev remove makes against the allocation ledger: the VM it
// gives an instance to ("" for none). The ledger is read once, on first use; an unreadable one
// gives nobody (the kernel's holders still decide).
func ledgerHolder(root host.Root) func(mdev.Instance) string {
	var once sync.Once
	var book *ledger.Book
	return func(in mdev.Instance) string {
		once.Do(func() { book, _ = ledger.Open(root).Read() })
		if book == nil {
			return ""
		}
		if in.VF != nil {
			return book.Holder(ledger.Claim{Kind: ledger.KindVendorVGPU, ID: in.VF.String()})
		}
		return book.Holder(ledger.Claim{Kind: ledger.KindMdev, ID: in.UUID})
	}
}

// DryRunReport is the --dry-run output of the mdev, vf and host commands: the sysfs writes in
// order, and the files vgpu-host itself would write.
type DryRunReport struct {
	DryRun bool                 `json:"dry_run"`
	Writes []host.RecordedWrite `json:"writes"`
	Files  []string             `json:"files,omitempty"`
	Result any                  `json:"result,omitempty"`
}

// DryRun is the report of the writes rec recorded, the files and the result.
func DryRun(rec *host.Recorder, files []string, result any) *DryRunReport {
	r := &DryRunReport{DryRun: true, Writes: rec.Writes(), Files: files, Result: result}
	if r.Writes == nil {
		r.Writes = []host.RecordedWrite{}
	}
	return r
}
