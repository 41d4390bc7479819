// Package deviceplugin serves kube.Catalog resources to the kubelet over the device plugin
// API v1beta1 (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1): one gRPC server on a unix socket
// in the kubelet's device-plugins directory per resource, registered with the kubelet's
// Registration service on kubelet.sock.
//
// The whole conversation, as the kubelet has it with every plugin:
//
//	plugin  → kubelet.sock  Register{version: v1beta1, endpoint: vgpu-host-nvidia.com_GRID_A100-4C.sock, resourceName: nvidia.com/GRID_A100-4C}
//	kubelet → endpoint      ListAndWatch  (a stream: the device list now, and again whenever a device's health changes)
//	kubelet → endpoint      GetPreferredAllocation{available, mustInclude, size}   (vgpu-host's placement)
//	kubelet → endpoint      Allocate{devicesIDs} → envs PCI_RESOURCE_<NAME> | MDEV_PCI_RESOURCE_<NAME>, devices /dev/vfio/vfio, /dev/vfio/N
//
// Health comes from the live inventory: the host is re-scanned every Options.Interval, and a
// device that is rebound to a host driver, whose group stops being viable, or that disappears
// is sent as Unhealthy in the next ListAndWatch message. When the kubelet restarts it deletes
// every socket in the directory and creates kubelet.sock anew; the same loop notices (a
// different kubelet.sock, or a plugin socket gone), serves again and re-registers.
//
// This package links gRPC and the kubelet API, whose init is heavy: only the helper binary
// vgpu-host-kube imports it, never vgpu-host.
package deviceplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/kube"
)

// Container paths of VFIO device nodes. These are the node's (and the container's) paths as
// the kubelet and the container runtime see them, not paths under --host-root.
const (
	vfioDir       = "/dev/vfio"
	vfioContainer = "/dev/vfio/vfio"
)

// plugin serves one resource.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	name   string
	socket string // absolute path
	root   host.Root

	mu      sync.Mutex
	res     kube.Resource          // the current catalog entry, devices merged with known ones
	known   map[string]kube.Device // every device ever advertised, for "gone" reports
	changed chan struct{}          // closed and replaced when res changes
	listed  bool                   // res has been set once
	srv     *grpc.Server
	stopped chan struct{} // closed when the plugin is stopped for good

	reg regState // the Server's loop alone reads and writes it
}

// regState is where a plugin stands with the kubelet.
type regState struct {
	kubelet   os.FileInfo   // the kubelet.sock that accepted the plugin, nil while not registered
	refusedBy os.FileInfo   // the kubelet.sock that last refused it (or could not be reached)
	wait      time.Duration // the current back-off
	retryAt   time.Time     // no new try with refusedBy before
}

// SocketName is the file name of a resource's plugin socket: "vgpu-host-" and the resource name
// with "/" as "_" ("vgpu-host-nvidia.com_GRID_A100-4C.sock").
func SocketName(resource string) string {
	return "vgpu-host-" + strings.ReplaceAll(resource, "/", "_") + ".sock"
}

// maxSocketPath is the longest unix socket path Linux takes (sun_path is 108 bytes with its NUL).
const maxSocketPath = 107

// socketPath is the socket of resource in dir: SocketName, or "vgpu-host-" and a hash of the
// name when that would be longer than a unix socket path may be.
func socketPath(dir, resource string) string {
	p := filepath.Join(dir, SocketName(resource))
	if len(p) <= maxSocketPath {
		return p
	}
	sum := sha256.Sum256([]byte(resource))
	return filepath.Join(dir, "vgpu-host-"+hex.EncodeToString(sum[:8])+".sock")
}

func newPlugin(root host.Root, dir string, r kube.Resource) *plugin {
	p := &plugin{name: r.Name, socket: socketPath(dir, r.Name), root: root, known: map[string]kube.Device{},
		changed: make(chan struct{}), stopped: make(chan struct{})}
	p.update(r)
	return p
}

// update replaces the resource's devices with r's; devices advertised before and missing now
// stay listed as unhealthy, so the kubelet stops counting them rather than forgetting a device
// a pod may hold. It reports whether anything the kubelet sees changed.
func (p *plugin) update(r kube.Resource) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range r.Devices {
		seen[d.ID] = true
		p.known[d.ID] = d
	}
	for id, d := range p.known {
		if !seen[id] {
			d.Healthy = false
			d.Reason = "gone from the host (removed, or no longer a " + string(r.Kind) + " device of this type)"
			p.known[id] = d
			r.Devices = append(r.Devices, d)
		}
	}
	sort.Slice(r.Devices, func(i, j int) bool { return r.Devices[i].ID < r.Devices[j].ID })
	same := len(r.Devices) == len(p.res.Devices)
	for i := 0; same && i < len(r.Devices); i++ {
		a, b := r.Devices[i], p.res.Devices[i]
		same = a.ID == b.ID && a.Healthy == b.Healthy && a.NUMA == b.NUMA
	}
	p.res = r
	if same && p.listed {
		return false
	}
	p.listed = true
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

// snapshot returns the current resource and the channel closed on its next change.
func (p *plugin) snapshot() (kube.Resource, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res, p.changed
}

// devices is the ListAndWatch message for r.
func devices(r kube.Resource) *pluginapi.ListAndWatchResponse {
	out := &pluginapi.ListAndWatchResponse{Devices: make([]*pluginapi.Device, 0, len(r.Devices))}
	for _, d := range r.Devices {
		pd := &pluginapi.Device{ID: d.ID, Health: pluginapi.Unhealthy}
		if d.Healthy {
			pd.Health = pluginapi.Healthy
		}
		if d.NUMA >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMA)}}}
		}
		out.Devices = append(out.Devices, pd)
	}
	return out
}

// GetDevicePluginOptions says the plugin answers GetPreferredAllocation and needs no
// PreStartContainer.
func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list now and after every change, until the kubelet hangs up
// or the plugin stops.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		r, changed := p.snapshot()
		if err := s.Send(devices(r)); err != nil {
			return fmt.Errorf("list and watch %s: %w", p.name, err)
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		case <-p.stopped:
			return nil
		}
	}
}

// GetPreferredAllocation answers with kube.Prefer for each container.
func (p *plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	r, _ := p.snapshot()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids, err := kube.Prefer(&r, c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		if err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate answers KubeVirt's contract for each container: the resource's variable
// (PCI_RESOURCE_<NAME> with the PCI addresses, MDEV_PCI_RESOURCE_<NAME> with the mdev UUIDs,
// comma-separated, in the order asked), and the VFIO container plus the group node of every
// IOMMU group the devices and their companions are in.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	r, _ := p.snapshot()
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr, err := allocate(p.root, r, c.DevicesIds)
		if err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

// allocate is Allocate for one container. Like KubeVirt's own plugin it adds the VFIO cdev
// nodes (/dev/vfio/devices/vfioN) of the PCI functions it hands over, where the kernel has them.
func allocate(root host.Root, r kube.Resource, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	byID := map[string]kube.Device{}
	for _, d := range r.Devices {
		byID[d.ID] = d
	}
	var values []string
	groups := map[int]bool{}
	specs := []*pluginapi.DeviceSpec{{HostPath: vfioContainer, ContainerPath: vfioContainer, Permissions: "mrw"}}
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("allocate %s: device %s: %w", r.Name, id, host.ErrNotFound)
		}
		if !d.Healthy {
			return nil, fmt.Errorf("allocate %s: device %s is unhealthy: %s: %w", r.Name, id, d.Reason, host.ErrBusy)
		}
		values = append(values, d.ID)
		if d.Address != nil {
			for _, a := range append([]host.Address{*d.Address}, d.Companions...) {
				for _, n := range host.VFIOCdevs(root, a) {
					specs = append(specs, &pluginapi.DeviceSpec{HostPath: n, ContainerPath: n, Permissions: "mrw"})
				}
			}
		}
		for _, g := range d.Groups {
			if groups[g] || !exists(host.VFIODev(root, g)) {
				// No group node: a cdev-only kernel (MarkDeviceNodes let the device through
				// because its /dev/vfio/devices nodes are all there, and they are handed over).
				continue
			}
			groups[g] = true
			n := filepath.Join(vfioDir, strconv.Itoa(g))
			specs = append(specs, &pluginapi.DeviceSpec{HostPath: n, ContainerPath: n, Permissions: "mrw"})
		}
	}
	return &pluginapi.ContainerAllocateResponse{
		Envs:    map[string]string{r.EnvVar(): strings.Join(values, ",")},
		Devices: specs,
	}, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// PreStartContainer is not used (GetDevicePluginOptions says so).
func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve (re)starts the plugin's gRPC server on its socket.
func (p *plugin) serve() error {
	p.stopServer()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("serve %s: remove stale socket: %w", p.name, err)
	}
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("serve %s: %w", p.name, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()
	p.srv = srv
	return nil
}

// stop ends the plugin's server and streams and removes its socket.
func (p *plugin) stop() {
	p.mu.Lock()
	select {
	case <-p.stopped:
	default:
		close(p.stopped)
	}
	p.mu.Unlock()
	p.stopServer()
	_ = os.Remove(p.socket)
}

// stopServer ends the gRPC server (not the plugin): serve starts it again. The server is
// stopped without p.mu held: Stop waits for the running handlers, and ListAndWatch takes p.mu
// (snapshot), so stopping under the lock could wait for ever (seen: a kubelet that went away
// mid-registration left the plugin stuck and never registered again).
func (p *plugin) stopServer() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// serving reports whether the gRPC server runs and its socket exists.
func (p *plugin) serving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := os.Stat(p.socket)
	return p.srv != nil && err == nil
}
