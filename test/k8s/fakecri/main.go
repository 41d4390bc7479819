//go:build k8sfakecri

// Command fakecri is the container runtime for test/k8s: upstream's fake CRI server
// (k8s.io/cri-client/pkg/fake, the one the kubelet's own tests use) wrapped so that every
// container the kubelet creates has its CRI ContainerConfig — env, devices, mounts, the
// values the device plugin's Allocate answered — appended as one JSON line to -record.
// Nothing runs: sandboxes and containers only exist in the fake's memory, which is enough
// for the kubelet to admit a Pod, call the device plugin and report the Pod Running.
//
// test/k8s/build.sh builds it inside the Kubernetes checkout it builds the kubelet from; the
// build tag keeps it out of this module's binaries and default vet, and go.mod requires its
// k8s.io/cri-* at that Kubernetes' staging version so that `go vet -tags k8sfakecri` works
// here (scripts/vet-fakecri.sh, in make lint, checks both).

package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

type recording struct {
	*fake.RemoteRuntime
	mu  sync.Mutex
	out *os.File
}

func (r *recording) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	rec := map[string]any{
		"pod":         req.GetSandboxConfig().GetMetadata().GetName(),
		"namespace":   req.GetSandboxConfig().GetMetadata().GetNamespace(),
		"container":   req.GetConfig().GetMetadata().GetName(),
		"envs":        req.GetConfig().GetEnvs(),
		"devices":     req.GetConfig().GetDevices(),
		"mounts":      req.GetConfig().GetMounts(),
		"cdi":         req.GetConfig().GetCDIDevices(),
		"annotations": req.GetConfig().GetAnnotations(),
	}
	if err != nil {
		rec["error"] = err.Error()
	}
	b, _ := json.Marshal(rec)
	r.mu.Lock()
	r.out.Write(append(b, '\n'))
	r.mu.Unlock()
	log.Printf("CreateContainer %s", b)
	return resp, err
}

func main() {
	endpoint := flag.String("endpoint", "unix:///run/vgpu-host-k8s/cri.sock", "CRI endpoint to serve")
	record := flag.String("record", "cri-record.jsonl", "file the created containers' configs are appended to")
	flag.Parse()
	out, err := os.OpenFile(*record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	f := fake.NewFakeRemoteRuntime()
	// Images "pulled" get a size: the kubelet refuses an image whose size is 0.
	f.ImageService.SetFakeImageSize(1 << 20)
	f.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true},
		{Type: kubeapi.NetworkReady, Status: true},
	}}
	r := &recording{RemoteRuntime: f, out: out}
	srv := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(srv, r)
	kubeapi.RegisterImageServiceServer(srv, r)
	l, err := util.CreateListener(*endpoint)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("fake CRI serving %s, recording to %s", *endpoint, *record)
	go srv.Serve(l)
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
	srv.Stop()
}
