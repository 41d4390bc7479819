package clitree

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mig"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// The MIG state cache: what NVML last said about MIG, kept so that inspect shows its MIG
// section without starting the NVML helper (whose nvmlInit costs ~30 ms on a real H200 host,
// three times lspci -nnk's whole run; docs/inspect.md, "MIG and speed"). Every command that
// reads NVML's MIG state writes it (mig show, plan, apply; host layout apply; the boot
// reconcile; inspect --mig), after a change too, and the agent refreshes it every
// migCacheRefresh. It lives under /run, a tmpfs: a reboot, which destroys every GPU instance,
// takes the cache with it.
const (
	migCacheFile = "mig-state.json"
	// migCacheLimit bounds a read of the cache (an 8-GPU host's state is ~60 KB).
	migCacheLimit = 4 << 20
	// migCacheRefresh is how often the agent reads NVML again for the cache, to see MIG
	// changes made past vgpu-host (nvidia-smi mig).
	migCacheRefresh = time.Minute
)

// migCachePath is ROOT/run/vgpu-host/mig-state.json.
func migCachePath(root host.Root) string { return root.Path("run", "vgpu-host", migCacheFile) }

// migCacheUsable reports whether root's cache may be read and written: always under a fake
// root; on this machine only when NVML (as nv starts it) is the driver's, so that a mock
// NVML's state (the helper's test build, in tests) never lands in the host's /run.
func migCacheUsable(nv migremote.Env, root host.Root) bool {
	return !root.IsReal() || (nv.Getenv(migremote.EnvMock) == "" && nv.Getenv(migremote.EnvFacts) == "")
}

// migCache is the cache file: NVML's MIG state, when it was read and by which process.
type migCache struct {
	ReadAt time.Time `json:"read_at"`
	By     string    `json:"by"`
	State  mig.State `json:"state"`
}

// saveMIGCache writes st as the cache under root. Best effort: a caller who may not write
// /run/vgpu-host (not root) leaves the cache as it was, and the next root command or the
// agent writes it.
func saveMIGCache(nv migremote.Env, root host.Root, st mig.State) {
	if !migCacheUsable(nv, root) {
		return
	}
	b, err := json.Marshal(migCache{ReadAt: time.Now().UTC(), By: fmt.Sprintf("%s (pid %d)", filepath.Base(os.Args[0]), os.Getpid()), State: st})
	if err != nil {
		return
	}
	p := migCachePath(root)
	if root.MkdirAll(filepath.Dir(p), 0o755) != nil {
		return
	}
	_ = root.WriteFileAtomic(p, b, 0o644)
}

// dropMIGCache removes the cache (a change whose outcome was not read back: no cache beats a
// wrong one).
func dropMIGCache(nv migremote.Env, root host.Root) {
	if migCacheUsable(nv, root) {
		_ = root.Remove(migCachePath(root))
	}
}

// loadMIGCache reads the cache under root.
func loadMIGCache(nv migremote.Env, root host.Root) (migCache, error) {
	if !migCacheUsable(nv, root) {
		return migCache{}, fmt.Errorf("the MIG state cache of this machine is not read with a mock NVML: %w", fs.ErrNotExist)
	}
	b, err := root.ReadFileLimit(migCachePath(root), migCacheLimit)
	if err != nil {
		return migCache{}, err
	}
	var c migCache
	if err := json.Unmarshal(b, &c); err != nil {
		return migCache{}, fmt.Errorf("read %s: %w", migCachePath(root), err)
	}
	return c, nil
}

// migCaching is a mig.Backend that keeps the cache under root: every State it reads is saved,
// and after a change the state is read again and saved when Flush is called (or dropped if
// that read fails), so the cache never shows what a change undid.
type migCaching struct {
	mig.Backend
	nv    migremote.Env
	root  host.Root
	dirty atomic.Bool
}

// cachingMIG wraps b, the NVML nv started, so that what it reads and changes keeps root's MIG
// state cache.
func cachingMIG(nv migremote.Env, root host.Root, b mig.Backend) *migCaching {
	return &migCaching{Backend: b, nv: nv, root: root}
}

// State implements mig.Backend, saving what it read.
func (b *migCaching) State(ctx context.Context) (mig.State, error) {
	st, err := b.Backend.State(ctx)
	if err == nil {
		b.dirty.Store(false)
		saveMIGCache(b.nv, b.root, st)
	}
	return st, err
}

func (b *migCaching) changed() {
	if !b.dirty.Swap(true) {
		dropMIGCache(b.nv, b.root)
	}
}

// SetMode implements mig.Backend.
func (b *migCaching) SetMode(ctx context.Context, address string, enabled bool) error {
	defer b.changed()
	return b.Backend.SetMode(ctx, address, enabled)
}

// Create implements mig.Backend.
func (b *migCaching) Create(ctx context.Context, address, profile string, start int) (mig.Instance, error) {
	defer b.changed()
	return b.Backend.Create(ctx, address, profile, start)
}

// Destroy implements mig.Backend.
func (b *migCaching) Destroy(ctx context.Context, address string, id int) error {
	defer b.changed()
	return b.Backend.Destroy(ctx, address, id)
}

// Flush reads the state again after changes, saving it (the cache was dropped at the first
// change). Call it before letting the helper go.
func (b *migCaching) Flush(ctx context.Context) {
	if b.dirty.Load() {
		_, _ = b.State(context.WithoutCancel(ctx))
	}
}
