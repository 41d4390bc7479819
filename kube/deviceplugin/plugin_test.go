package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/internal/kubetest"
	"github.com/vgpu-host/vgpu-host/kube"
	"github.com/vgpu-host/vgpu-host/ledger"
)

// fakeKubelet is the kubelet's side of the device plugin API, on a real unix socket: it
// serves Registration, and for every registration dials the plugin's endpoint and follows
// ListAndWatch, as the kubelet's device manager does.
type fakeKubelet struct {
	t    *testing.T
	dir  string
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest

	mu    sync.Mutex
	lists map[string][]*pluginapi.ListAndWatchResponse // by resource
	conns map[string]*grpc.ClientConn
	upd   chan string // resource names with a new list

	refuse  map[string]bool // resource names Register refuses, as the kubelet refuses invalid ones
	refused map[string]int  // refused Register calls by resource
	ended   map[string]int  // ListAndWatch streams that ended, by resource
}

type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k *fakeKubelet
}

func (r registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.k.mu.Lock()
	if r.k.refuse[req.ResourceName] {
		r.k.refused[req.ResourceName]++
		r.k.mu.Unlock()
		// The device manager's answer to a name failing IsExtendedResourceName
		// (k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go
		// Register, errInvalidResourceName in api.go).
		return nil, fmt.Errorf("the ResourceName %q is invalid", req.ResourceName)
	}
	r.k.mu.Unlock()
	r.k.regs <- req
	go r.k.watch(req)
	return &pluginapi.Empty{}, nil
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{t: t, dir: dir, regs: make(chan *pluginapi.RegisterRequest, 32),
		lists: map[string][]*pluginapi.ListAndWatchResponse{}, conns: map[string]*grpc.ClientConn{}, upd: make(chan string, 256),
		refuse: map[string]bool{}, refused: map[string]int{}, ended: map[string]int{}}
	k.start()
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) start() {
	sock := filepath.Join(k.dir, "kubelet.sock")
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		k.t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, registration{k: k})
	go k.srv.Serve(l)
}

func (k *fakeKubelet) stop() {
	k.srv.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = map[string]*grpc.ClientConn{}
}

// restart is what a kubelet restart looks like from the directory: every socket in it is
// deleted and kubelet.sock is created anew.
func (k *fakeKubelet) restart() {
	k.stop()
	ents, _ := os.ReadDir(k.dir)
	for _, e := range ents {
		os.Remove(filepath.Join(k.dir, e.Name()))
	}
	k.start()
}

func (k *fakeKubelet) client(endpoint string) pluginapi.DevicePluginClient {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.conns[endpoint]
	if !ok {
		var err error
		c, err = grpc.NewClient("unix://"+filepath.Join(k.dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			k.t.Error(err)
			return nil
		}
		k.conns[endpoint] = c
	}
	return pluginapi.NewDevicePluginClient(c)
}

func (k *fakeKubelet) watch(req *pluginapi.RegisterRequest) {
	c := k.client(req.Endpoint)
	if c == nil {
		return
	}
	s, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		return
	}
	for {
		m, err := s.Recv()
		if err != nil {
			k.mu.Lock()
			k.ended[req.ResourceName]++
			k.mu.Unlock()
			return
		}
		k.mu.Lock()
		k.lists[req.ResourceName] = append(k.lists[req.ResourceName], m)
		k.mu.Unlock()
		k.upd <- req.ResourceName
	}
}

// waitRegs returns the next n registrations.
func (k *fakeKubelet) waitRegs(n int) map[string]*pluginapi.RegisterRequest {
	k.t.Helper()
	out := map[string]*pluginapi.RegisterRequest{}
	deadline := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case r := <-k.regs:
			out[r.ResourceName] = r
		case <-deadline:
			k.t.Fatalf("got %d registrations, want %d", len(out), n)
		}
	}
	return out
}

// waitList waits until the latest list of resource satisfies ok, and returns it.
func (k *fakeKubelet) waitList(resource string, ok func(map[string]string) bool) map[string]string {
	k.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		k.mu.Lock()
		ls := k.lists[resource]
		var last map[string]string
		if len(ls) > 0 {
			last = map[string]string{}
			for _, d := range ls[len(ls)-1].Devices {
				last[d.ID] = d.Health
			}
		}
		k.mu.Unlock()
		if last != nil && ok(last) {
			return last
		}
		select {
		case <-k.upd:
		case <-deadline:
			k.t.Fatalf("%s: list never matched; last %v", resource, last)
		}
	}
}

// consumerHost is a GPU + HDMI audio in one group and a second GPU whose audio function is in
// a group of its own, all on vfio-pci.
func consumerHost(t *testing.T) (*hosttest.Tree, [4]host.Address) {
	tr := hosttest.New(t)
	tr.WriteFile("usr/share/misc/pci.ids", kubetest.PCIIDs)
	gpu, audio := tr.ConsumerGPU("0000:00:01.0", "0000:01:00.0", "vfio-pci")
	tr.Bind(audio, "vfio-pci")
	tr.RootPort("0000:00:02.0")
	gpu2 := tr.AddPCI(hosttest.PCI{Addr: "0000:02:00.0", Parent: "0000:00:02.0", Vendor: hosttest.VendorNVIDIA, Device: 0x2206,
		Class: 0x030000, Driver: "vfio-pci", NativeDriver: "nouveau", Group: tr.NewGroup()})
	audio2 := tr.AddPCI(hosttest.PCI{Addr: "0000:02:00.1", Parent: "0000:00:02.0", Vendor: hosttest.VendorNVIDIA, Device: 0x1aef,
		Class: 0x040300, Driver: "vfio-pci", NativeDriver: "snd_hda_intel", Group: tr.NewGroup()})
	return tr, [4]host.Address{gpu, audio, gpu2, audio2}
}

// socketDir is a short temporary directory: unix socket paths are limited to 107 bytes, and
// t.TempDir() under a long test name is not.
func socketDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func run(t *testing.T, root host.Root, dir string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := New(Options{Root: root, KubeletDir: dir, Interval: 50 * time.Millisecond, Logf: t.Logf})
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

const rtx = "nvidia.com/GA102_GEFORCE_RTX_3080"

func TestRegisterListAllocateAndHealth(t *testing.T) {
	tr, a := consumerHost(t)
	dir := socketDir(t)
	k := startKubelet(t, dir)
	run(t, tr.Root, dir)

	// A kernel with VFIO cdevs (≥ 6.6): gpu2 and its audio function have one each.
	for i, a := range []host.Address{a[2], a[3]} {
		if err := os.MkdirAll(filepath.Join(tr.DevDir(a), "vfio-dev", "vfio"+strconv.Itoa(7+i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	regs := k.waitRegs(1)
	r, ok := regs[rtx]
	if !ok {
		t.Fatalf("registrations %v, want %s", regs, rtx)
	}
	if r.Version != pluginapi.Version || r.Endpoint != SocketName(rtx) || !r.Options.GetPreferredAllocationAvailable {
		t.Errorf("register request %+v", r)
	}
	k.waitList(rtx, func(m map[string]string) bool {
		return len(m) == 2 && m[a[0].String()] == pluginapi.Healthy && m[a[2].String()] == pluginapi.Healthy
	})

	// Allocate both GPUs: the env names the GPUs in the order asked; the device specs are
	// the VFIO container and every group, the companions' included (gpu2's audio has a group
	// of its own).
	c := k.client(r.Endpoint)
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{a[2].String(), a[0].String()}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	wantEnv := map[string]string{"PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080": a[2].String() + "," + a[0].String()}
	if len(cr.Envs) != 1 || cr.Envs["PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080"] != wantEnv["PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080"] {
		t.Errorf("envs %v, want %v", cr.Envs, wantEnv)
	}
	var paths []string
	for _, d := range cr.Devices {
		if d.HostPath != d.ContainerPath || d.Permissions != "mrw" {
			t.Errorf("device spec %+v", d)
		}
		paths = append(paths, d.HostPath)
	}
	want := []string{"/dev/vfio/vfio", "/dev/vfio/devices/vfio7", "/dev/vfio/devices/vfio8"}
	for _, g := range []int{tr.Group(a[2]), tr.Group(a[3]), tr.Group(a[0])} {
		want = append(want, "/dev/vfio/"+strconv.Itoa(g))
	}
	if tr.Group(a[0]) != tr.Group(a[1]) || tr.Group(a[2]) == tr.Group(a[3]) {
		t.Fatalf("fixture: groups %d %d %d %d", tr.Group(a[0]), tr.Group(a[1]), tr.Group(a[2]), tr.Group(a[3]))
	}
	if !slices.Equal(paths, want) {
		t.Errorf("device specs %v, want %v", paths, want)
	}
	if _, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"0000:09:00.0"}}}}); err == nil {
		t.Error("allocating an unknown device succeeded")
	}

	// The host takes the first GPU back (rebound to nouveau): unhealthy within seconds.
	tr.Unbind(a[0])
	tr.Bind(a[0], "nouveau")
	k.waitList(rtx, func(m map[string]string) bool {
		return m[a[0].String()] == pluginapi.Unhealthy && m[a[2].String()] == pluginapi.Healthy
	})
	if _, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{a[0].String()}}}}); err == nil {
		t.Error("allocating an unhealthy device succeeded")
	}
	// Only its companion rebound to the host driver: the group is not viable.
	tr.Unbind(a[3])
	tr.Bind(a[3], "snd_hda_intel")
	k.waitList(rtx, func(m map[string]string) bool { return m[a[2].String()] == pluginapi.Unhealthy })
	// Back on vfio-pci: healthy again.
	tr.Unbind(a[3])
	tr.Bind(a[3], "vfio-pci")
	k.waitList(rtx, func(m map[string]string) bool { return m[a[2].String()] == pluginapi.Healthy })
	// Given to a libvirt VM by `vgpu-host apply` (its companion claimed in the ledger):
	// unhealthy until the VM is destroyed.
	l := ledger.Open(tr.Root)
	if err := l.Update(func(b *ledger.Book) error {
		return b.Claim("train-01", ledger.Claim{Kind: ledger.KindPCI, ID: a[3].String(), Detail: "companion"})
	}); err != nil {
		t.Fatal(err)
	}
	k.waitList(rtx, func(m map[string]string) bool { return m[a[2].String()] == pluginapi.Unhealthy })
	if _, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{a[2].String()}}}}); err == nil || !strings.Contains(err.Error(), "held by VM train-01") {
		t.Errorf("allocating a device a VM holds: %v", err)
	}
	if err := l.Update(func(b *ledger.Book) error {
		b.Release("train-01", ledger.Claim{Kind: ledger.KindPCI, ID: a[3].String()})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	k.waitList(rtx, func(m map[string]string) bool { return m[a[2].String()] == pluginapi.Healthy })
	// Removed from the bus: still listed, unhealthy.
	if err := os.Remove(tr.Root.Sys("bus", "pci", "devices", a[2].String())); err != nil {
		t.Fatal(err)
	}
	k.waitList(rtx, func(m map[string]string) bool { return m[a[2].String()] == pluginapi.Unhealthy })
}

func TestKubeletRestartReregisters(t *testing.T) {
	tr, a := consumerHost(t)
	dir := socketDir(t)
	k := startKubelet(t, dir)
	run(t, tr.Root, dir)
	k.waitRegs(1)
	k.waitList(rtx, func(m map[string]string) bool { return len(m) == 2 })

	k.restart()
	r := k.waitRegs(1)[rtx]
	if r == nil {
		t.Fatal("no re-registration after the kubelet restarted")
	}
	if _, err := os.Stat(filepath.Join(dir, r.Endpoint)); err != nil {
		t.Fatalf("plugin socket after re-registration: %v", err)
	}
	// The new kubelet reaches the plugin on the re-created socket.
	resp, err := k.client(r.Endpoint).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{a[0].String()}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs["PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080"]; got != a[0].String() {
		t.Errorf("env after restart %q", got)
	}
	select {
	case r := <-k.regs:
		t.Errorf("registered again without a restart: %v", r)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestPreferredAllocationTwoNUMA(t *testing.T) {
	tr := hosttest.New(t)
	tr.WriteFile("usr/share/misc/pci.ids", kubetest.PCIIDs)
	n0 := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "vfio-pci", 0)
	n1a := tr.DatacenterGPU("0000:80:01.0", "0000:81:00.0", "vfio-pci", 1)
	n1b := tr.DatacenterGPU("0000:80:02.0", "0000:82:00.0", "vfio-pci", 1)
	dir := socketDir(t)
	k := startKubelet(t, dir)
	run(t, tr.Root, dir)
	const a100 = "nvidia.com/GA100_A100_SXM4_40GB"
	r := k.waitRegs(1)[a100]
	if r == nil {
		t.Fatalf("%s not registered", a100)
	}
	lists := k.waitList(a100, func(m map[string]string) bool { return len(m) == 3 })
	_ = lists
	// NUMA topology is in the list the kubelet gets.
	k.mu.Lock()
	for _, d := range k.lists[a100][len(k.lists[a100])-1].Devices {
		want := int64(1)
		if d.ID == n0.String() {
			want = 0
		}
		if d.Topology == nil || len(d.Topology.Nodes) != 1 || d.Topology.Nodes[0].ID != want {
			t.Errorf("%s topology %v, want node %d", d.ID, d.Topology, want)
		}
	}
	k.mu.Unlock()

	all := []string{n0.String(), n1a.String(), n1b.String()}
	for _, tc := range []struct {
		name  string
		must  []string
		size  int32
		want  []string
		avail []string
	}{
		// Two: node 1 fits exactly; node 0's single GPU stays for a single request.
		{"pair stays on one node", nil, 2, []string{n1a.String(), n1b.String()}, all},
		// One: best fit is node 0 (one free), keeping node 1's pair whole.
		{"single takes the smallest hole", nil, 1, []string{n0.String()}, all},
		// Must include one on node 1: the second comes from node 1 too.
		{"must-include pulls its node", []string{n1b.String()}, 2, []string{n1b.String(), n1a.String()}, all},
		// Three: all of them, node 1 first (it is the larger pool once nothing fits all).
		{"all", nil, 3, []string{n1a.String(), n1b.String(), n0.String()}, all},
	} {
		resp, err := k.client(r.Endpoint).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: tc.avail, MustIncludeDeviceIDs: tc.must, AllocationSize: tc.size}}})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, tc.want) {
			t.Errorf("%s: preferred %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := k.client(r.Endpoint).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: all[:1], AllocationSize: 2}}}); err == nil {
		t.Error("a request larger than what is available got an answer")
	}
}

// TestMdevAndVendorVFIO: mdev instances are MDEV_PCI_RESOURCE_ devices with their own group;
// vendor-VFIO VFs with a type are PCI_RESOURCE_ devices of the type's resource.
func TestMdevAndVendorVFIO(t *testing.T) {
	tr := hosttest.New(t)
	tr.WriteFile("usr/share/misc/pci.ids", kubetest.PCIIDs)
	gpu := tr.DatacenterGPU("0000:40:01.0", "0000:41:00.0", "nvidia", 0)
	tr.A100Mdev(gpu)
	u1, u2 := "11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000"
	rel, _ := filepath.Rel(tr.Dir(), tr.DevDir(gpu))
	tr.CreateMdev(rel, "nvidia-471", u1)
	tr.CreateMdev(rel, "nvidia-471", u2)
	l40 := tr.NvidiaSRIOVGPU("0000:80:01.0", "0000:81:00.0", 1, 4, nil)
	k0 := hosttest.NewKernel(tr)
	vf := tr.VFAddress(l40, 0)
	if err := k0.Write(context.Background(), tr.Root.PCIDevice(vf, "nvidia", "current_vgpu_type"), "1160"); err != nil {
		t.Fatal(err)
	}
	inv, err := host.Scan(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	cat := kube.Build(inv, kube.Config{})
	md, ok := cat.Resource("nvidia.com/GRID_A100-4C")
	if !ok || md.Kind != kube.KindMdev || len(md.Devices) != 2 || md.Healthy() != 2 {
		t.Fatalf("mdev resource %+v in %+v", md, cat.Resources)
	}
	resp, err := allocate(tr.Root, *md, []string{u2, u1})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Envs["MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_A100-4C"]; got != u2+","+u1 || len(resp.Envs) != 1 {
		t.Errorf("mdev envs %v", resp.Envs)
	}
	if len(resp.Devices) != 3 { // container + one group per instance
		t.Errorf("mdev device specs %v", resp.Devices)
	}
	vr, ok := cat.Resource("nvidia.com/NVIDIA_L40S-8Q")
	if !ok || vr.Kind != kube.KindVendorVFIO || len(vr.Devices) != 1 || vr.Devices[0].ID != vf.String() || vr.Devices[0].NUMA != 1 {
		t.Fatalf("vendor resource %+v in %+v", vr, cat.Resources)
	}
	resp, err = allocate(tr.Root, *vr, []string{vf.String()})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Envs["PCI_RESOURCE_NVIDIA_COM_NVIDIA_L40S-8Q"]; got != vf.String() {
		t.Errorf("vendor envs %v", resp.Envs)
	}
	for _, r := range cat.Resources {
		if r.Kind == kube.KindPCI {
			t.Errorf("an mdev parent or vendor-VFIO PF is offered whole: %+v", r)
		}
	}
}

func TestLongResourceNameSocket(t *testing.T) {
	dir := strings.Repeat("d", 60)
	long := "nvidia.com/" + strings.Repeat("X", 60)
	p := socketPath(dir, long)
	if len(p) > maxSocketPath || !strings.HasPrefix(filepath.Base(p), "vgpu-host-") || p == socketPath(dir, long+"Y") {
		t.Errorf("socket path %s (%d bytes)", p, len(p))
	}
	if got := socketPath("/var/lib/kubelet/device-plugins", "nvidia.com/GRID_A100-4C"); got != "/var/lib/kubelet/device-plugins/vgpu-host-nvidia.com_GRID_A100-4C.sock" {
		t.Errorf("short name hashed: %s", got)
	}
}

// TestRefusedRegistrationIsolated: the kubelet refuses one resource; the others stay
// registered with their ListAndWatch streams open (a real kubelet marks a resource's devices
// unhealthy whenever its stream ends), and the refused one is tried again with a back-off, not
// every turn. Before, every resource was served and registered anew every turn.
func TestRefusedRegistrationIsolated(t *testing.T) {
	tr := kubetest.ExampleHost(t)
	dir := socketDir(t)
	k := startKubelet(t, dir)
	const bad = "nvidia.com/GA100_A100_SXM4_40GB"
	k.mu.Lock()
	k.refuse[bad] = true
	k.mu.Unlock()
	run(t, tr.Root, dir) // a turn every 50ms
	regs := k.waitRegs(3)
	if regs[bad] != nil {
		t.Fatalf("refused resource registered: %v", regs)
	}
	for name := range regs {
		k.waitList(name, func(m map[string]string) bool { return len(m) > 0 })
	}
	time.Sleep(1500 * time.Millisecond) // 30 turns
	select {
	case r := <-k.regs:
		t.Errorf("%s registered again, its stream cut by another resource's refusal", r.ResourceName)
	default:
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for name := range regs {
		if k.ended[name] != 0 {
			t.Errorf("%s: %d ListAndWatch streams ended", name, k.ended[name])
		}
	}
	// Back-off from 50ms doubling: tries at about 0, 50, 150, 350, 750, 1550ms.
	if n := k.refused[bad]; n < 2 || n > 7 {
		t.Errorf("refused resource tried %d times in 1.5s, want a back-off (2 to 7)", n)
	}
}

// TestMissingGroupNodeUnhealthy: a device whose /dev/vfio/N is missing is Unhealthy and not
// allocated (the container could not start with it); on a kernel with only VFIO character
// devices it is healthy and handed over by its /dev/vfio/devices/vfioN alone. Before, health
// never looked at /dev/vfio.
func TestMissingGroupNodeUnhealthy(t *testing.T) {
	tr, a := consumerHost(t)
	dir := socketDir(t)
	k := startKubelet(t, dir)
	g := tr.Group(a[2]) // the second GPU; its audio function is in a group of its own
	node := filepath.Join(tr.Dir(), "dev/vfio", strconv.Itoa(g))
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	run(t, tr.Root, dir)
	r := k.waitRegs(1)[rtx]
	got := k.waitList(rtx, func(m map[string]string) bool { return len(m) == 2 })
	if got[a[2].String()] != pluginapi.Unhealthy || got[a[0].String()] != pluginapi.Healthy {
		t.Fatalf("without /dev/vfio/%d: %v", g, got)
	}
	if _, err := k.client(r.Endpoint).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{a[2].String()}}}}); err == nil {
		t.Error("allocated a device without its /dev/vfio node")
	}

	// A cdev-only kernel: each function's vfio-dev/vfioN and /dev/vfio/devices/vfioN (the
	// GPU's and its audio companion's).
	for i, f := range []host.Address{a[2], a[3]} {
		n := "vfio" + strconv.Itoa(3+i)
		tr.WriteFile(filepath.Join(strings.TrimPrefix(tr.DevDir(f), tr.Dir()+"/"), "vfio-dev", n, "dev"), "243:"+strconv.Itoa(3+i)+"\n")
		tr.WriteFile("dev/vfio/devices/"+n, "")
	}
	got = k.waitList(rtx, func(m map[string]string) bool { return m[a[2].String()] == pluginapi.Healthy })
	resp, err := k.client(r.Endpoint).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{a[2].String()}}}})
	if err != nil {
		t.Fatalf("cdev-only: %v (list %v)", err, got)
	}
	var paths []string
	for _, d := range resp.ContainerResponses[0].Devices {
		paths = append(paths, d.HostPath)
	}
	// The audio function's group node is there, and handed over too.
	want := []string{"/dev/vfio/vfio", "/dev/vfio/devices/vfio3", "/dev/vfio/devices/vfio4", "/dev/vfio/" + strconv.Itoa(tr.Group(a[3]))}
	if !slices.Equal(paths, want) {
		t.Errorf("cdev-only device nodes %v", paths)
	}
}

// TestQuarantinedUnhealthy: a GPU whose function was quarantined when it was handed back
// (docs/health.md) is Unhealthy to the kubelet and cannot be allocated; released, it is
// Healthy again.
func TestQuarantinedUnhealthy(t *testing.T) {
	tr, a := consumerHost(t)
	dir := socketDir(t)
	k := startKubelet(t, dir)
	q := &host.Quarantine{Address: a[3], Since: time.Now(), Op: "destroy vm1",
		Problems: []host.Problem{{Check: "config-space", Detail: "reads all ones (the function is gone from the bus)"}}}
	if err := host.SaveQuarantine(tr.Root, q); err != nil {
		t.Fatal(err)
	}
	run(t, tr.Root, dir)
	r := k.waitRegs(1)[rtx]
	got := k.waitList(rtx, func(m map[string]string) bool { return len(m) == 2 })
	// a[3] is the second GPU's audio companion: the whole GPU goes with it.
	if got[a[2].String()] != pluginapi.Unhealthy || got[a[0].String()] != pluginapi.Healthy {
		t.Fatalf("with %s quarantined: %v", a[3], got)
	}
	if _, err := k.client(r.Endpoint).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{a[2].String()}}}}); err == nil {
		t.Error("allocated a GPU whose companion is quarantined")
	}
	if err := os.Remove(host.QuarantinePath(tr.Root, a[3])); err != nil {
		t.Fatal(err)
	}
	k.waitList(rtx, func(m map[string]string) bool { return m[a[2].String()] == pluginapi.Healthy })
}

// TestXidUnhealthy: an NVIDIA Xid 79 handed to the agent's health watch makes the GPU
// Unhealthy to the kubelet at the next scan; an informational Xid on the other GPU does not.
func TestXidUnhealthy(t *testing.T) {
	tr, a := consumerHost(t)
	for _, g := range []host.Address{a[0], a[2]} {
		if err := host.RecordBaseline(tr.Root, g, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	dir := socketDir(t)
	k := startKubelet(t, dir)
	run(t, tr.Root, dir)
	k.waitList(rtx, func(m map[string]string) bool {
		return len(m) == 2 && m[a[0].String()] == pluginapi.Healthy && m[a[2].String()] == pluginapi.Healthy
	})
	w := host.NewHealthWatch(tr.Root)
	w.Poll = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	w.Xids() <- host.XidEvent{Address: a[0], Xid: 79, GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC()}
	w.Xids() <- host.XidEvent{Address: a[2], Xid: 13, GPUInstance: -1, ComputeInstance: -1, Time: time.Now().UTC()}
	got := k.waitList(rtx, func(m map[string]string) bool { return m[a[0].String()] == pluginapi.Unhealthy })
	if got[a[2].String()] != pluginapi.Healthy {
		t.Errorf("the GPU with only Xid 13 is %s", got[a[2].String()])
	}
}

// TestRunFailsWhenTheHostCannotBeRead: the first turn's inventory comes from ops.Inventory, and
// a root it cannot read ends Run with the plugin's scan error wrapping the host's (a scan that
// fails later is logged and tried again); OnScan gets host.Scan's inventory otherwise.
func TestRunFailsWhenTheHostCannotBeRead(t *testing.T) {
	t.Parallel()
	tr, a := consumerHost(t)
	var scanned []*host.Inventory
	s := New(Options{Root: tr.Root, KubeletDir: socketDir(t), OnScan: func(inv *host.Inventory, _ *kube.Catalog) { scanned = append(scanned, inv) }})
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.stopAll()
	if len(scanned) != 1 || len(scanned[0].Devices) == 0 || scanned[0].Devices[0].Address != a[0] || scanned[0].Root != tr.Root.Dir() {
		t.Fatalf("OnScan got %+v; want the fake host's inventory, %s first", scanned, a[0])
	}

	r := hosttest.RemovedRoot(t)
	err := New(Options{Root: r, KubeletDir: socketDir(t)}).Run(context.Background())
	if !errors.Is(err, errScan) || !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "device plugin: cannot scan the host: scan host root "+r.Dir()) {
		t.Errorf("run on a root removed: %v; want the plugin's scan error wrapping the host's", err)
	}
}
