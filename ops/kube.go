package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/kube"
)

// KubeConfig is the resource-name overrides of a Kubernetes command: a file's name and
// content (--config: the CLI reads it; the agent opens no file a caller names), or neither
// for the default file under the host root, when it exists.
type KubeConfig struct {
	// Config names the file (messages name it); ConfigData is its content.
	Config     string `json:"config,omitempty"`
	ConfigData []byte `json:"config_data,omitempty"`
}

// load parses the overrides, or reads the default file under root.
func (k KubeConfig) load(root host.Root) (kube.Config, error) {
	if k.Config != "" || k.ConfigData != nil {
		return kube.ParseConfig(k.Config, k.ConfigData)
	}
	return kube.LoadConfig(root.Path(kube.DefaultConfigPath), false)
}

// kubeCatalog reads the host and its catalog of resources: those offered to the cluster, or
// (offered false) every one with its device nodes and the ledger's holders marked. The names
// are recorded best-effort: a user without write access to the state directory still gets
// them, and the device plugin records the same ones from the same host.
func (e Env) kubeCatalog(k KubeConfig, offered bool) (*host.Inventory, *kube.Catalog, error) {
	root := e.Root
	cfg, err := k.load(root)
	if err != nil {
		return nil, nil, err
	}
	inv, err := host.Scan(root)
	if err != nil {
		return nil, nil, err
	}
	if cfg, err = cfg.WithRecorded(root); err != nil {
		return nil, nil, err
	}
	cat := kube.Build(inv, cfg)
	if offered {
		cat = kube.Offered(inv, cfg)
	}
	_ = cat.RecordNames(root, cfg)
	if offered {
		return inv, cat, nil
	}
	cat.MarkDeviceNodes(root)
	return inv, cat, cat.MarkHeldFromLedger(root)
}

// KubeVirtConfigRequest is `kubevirt config`: the KubeVirt CR patch permitting this host's
// GPU and vGPU resources.
type KubeVirtConfigRequest struct {
	KubeConfig
}

// Op is "kubevirt config".
func (KubeVirtConfigRequest) Op() string { return "kubevirt config" }

// Bool is false: kubevirt config has no boolean setting.
func (KubeVirtConfigRequest) Bool(string) bool { return false }

// IsSet reports whether the request sets the named setting.
func (r KubeVirtConfigRequest) IsSet(name string) bool { return name == "config" && r.Config != "" }

// KubeVirtConfigResult is the patch kubevirt config prints: its JSON is the command's
// --output json.
type KubeVirtConfigResult = kube.KubeVirtPatch

// KubeVirtConfig is kubevirt config: spec.configuration.permittedHostDevices from the host's
// resources, with a warning when there is none.
func KubeVirtConfig(_ context.Context, env Env, req KubeVirtConfigRequest) (*KubeVirtConfigResult, error) {
	_, cat, err := env.kubeCatalog(req.KubeConfig, true)
	if err != nil {
		return nil, err
	}
	if len(cat.Resources) == 0 {
		env.warn("kubevirt config", "", "vgpu-host: warning: this host has no GPU or vGPU resource; the patch permits nothing")
	}
	p := kube.Permitted(cat)
	return &p, nil
}

// KubeVirtLabelsRequest is `kubevirt labels`: the Node Feature Discovery labels of the host's
// state, and with Write its feature file replaced.
type KubeVirtLabelsRequest struct {
	KubeConfig
	// Write replaces NFD's feature file under the host root (--write).
	Write bool `json:"write,omitempty"`
}

// Op is "kubevirt labels".
func (KubeVirtLabelsRequest) Op() string { return "kubevirt labels" }

// Bool is the request's boolean setting by its flag's name.
func (r KubeVirtLabelsRequest) Bool(name string) bool { return name == "write" && r.Write }

// IsSet reports whether the request sets the named setting.
func (r KubeVirtLabelsRequest) IsSet(name string) bool {
	return r.Bool(name) || name == "config" && r.Config != ""
}

// KubeVirtLabelsResult is kubevirt labels' answer: its JSON is the command's --output json.
type KubeVirtLabelsResult struct {
	Labels []kube.Label `json:"labels"`
	// Written is the feature file written; empty without Write.
	Written string `json:"written"`
}

// KubeVirtLabels is kubevirt labels: the labels (what cannot be labelled comes as warnings),
// and with Write the feature file.
func KubeVirtLabels(_ context.Context, env Env, req KubeVirtLabelsRequest) (*KubeVirtLabelsResult, error) {
	inv, cat, err := env.kubeCatalog(req.KubeConfig, false)
	if err != nil {
		return nil, err
	}
	labels, skipped := kube.Labels(inv, cat)
	for _, s := range skipped {
		env.warn("kubevirt labels", "", "vgpu-host: warning: %s", s)
	}
	res := &KubeVirtLabelsResult{Labels: labels}
	if req.Write {
		if res.Written, err = kube.WriteFeatures(env.Root, labels, time.Time{}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// KubeVirtVMRequest is `kubevirt vm SPEC.yaml`: a VM spec as a KubeVirt VirtualMachine.
type KubeVirtVMRequest struct {
	// Spec is the VM spec: loaded by the CLI, or its content sent to the agent.
	Spec Spec `json:"spec"`
	KubeConfig
	// ContainerDisks makes each named disk a containerDisk of the image (--container-disk).
	ContainerDisks map[string]string `json:"container_disks,omitempty"`
	// Strict fails (exit 7) when a field cannot be expressed (--strict).
	Strict bool `json:"strict,omitempty"`
}

// Op is "kubevirt vm".
func (KubeVirtVMRequest) Op() string { return "kubevirt vm" }

// Bool is the request's boolean setting by its flag's name.
func (r KubeVirtVMRequest) Bool(name string) bool { return name == "strict" && r.Strict }

// IsSet reports whether the request sets the named setting.
func (r KubeVirtVMRequest) IsSet(name string) bool {
	switch name {
	case "config":
		return r.Config != ""
	case "container-disk":
		return len(r.ContainerDisks) > 0
	}
	return r.Bool(name)
}

// KubeVirtVMResult is the VirtualMachine kubevirt vm prints: its JSON is the command's
// --output json.
type KubeVirtVMResult = kube.VirtualMachine

// KubeVirtVM is kubevirt vm: the spec translated with the device plugin's resource names of
// this host; each field KubeVirt cannot express is a warning (kept in the manifest's
// annotation), and with Strict an error (exit 7).
func KubeVirtVM(_ context.Context, env Env, req KubeVirtVMRequest) (*KubeVirtVMResult, error) {
	vms, err := LoadSpecs("kubevirt vm", []Spec{req.Spec})
	if err != nil {
		return nil, err
	}
	vm := vms[0]
	if err := CheckContainerDisks(vm, req.ContainerDisks); err != nil {
		return nil, err
	}
	inv, cat, err := env.kubeCatalog(req.KubeConfig, true)
	if err != nil {
		return nil, fmt.Errorf("kubevirt vm %s: %w", vm.Metadata.Name, err)
	}
	tr, err := kube.TranslateVM(vm, inv, cat, kube.TranslateOptions{ContainerDisks: req.ContainerDisks})
	if err != nil {
		return nil, err
	}
	for _, f := range tr.Findings {
		env.warn("kubevirt vm", vm.Metadata.Name, "vgpu-host: not in the KubeVirt manifest: %s", f)
	}
	if req.Strict && len(tr.Findings) > 0 {
		return nil, fmt.Errorf("kubevirt vm %s: %d fields KubeVirt cannot express (listed above): %w", vm.Metadata.Name, len(tr.Findings), host.ErrUnsupported)
	}
	return &tr.VM, nil
}

// CheckContainerDisks refuses a containerDisk naming no disk of vm (exit 2).
func CheckContainerDisks(vm *domains.VM, disks map[string]string) error {
	for name := range disks {
		found := false
		for i, d := range vm.Spec.Disks {
			found = found || d.Name == name || d.Name == "" && name == fmt.Sprintf("disk%d", i)
		}
		if !found {
			return Usagef("--container-disk %s: the spec has no disk of that name", name)
		}
	}
	return nil
}
