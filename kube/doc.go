// Package kube makes vgpu-host the GPU device layer of a KubeVirt node, from plain Go values:
// the catalog of resources a kubelet device plugin advertises (Build), their names and the
// environment variables KubeVirt reads (ResourceName, EnvVar), a NUMA- and fragmentation-aware
// preferred allocation (Prefer), KubeVirt's permittedHostDevices patch (PermittedHostDevices),
// the translation of a vgpu-host VM spec into a KubeVirt VirtualMachine (TranslateVM), and
// Node Feature Discovery labels (Labels, WriteFeatures).
//
// It imports no Kubernetes or KubeVirt package: the vgpu-host binary links it and must start
// like a bare Go binary. Its manifests are small structs with the upstream JSON field names;
// tests decode them strictly into the upstream types (kubevirt.io/api, k8s.io/api) and compare
// every leaf after a round trip. The gRPC device plugin that serves the catalog lives in
// kube/deviceplugin and its own binary, vgpu-host-kube.
//
// Everything is read from the host model: the host's Inventory and the domains spec types,
// handed in by the typed operations' callers. The CLI's kubevirt commands run ops' kubevirt
// operations; kube/deviceplugin and kube/dra run ops.Inventory (vgpu-host inspect's operation)
// at every re-scan with HostOnly: the host alone, since this package reads each device's
// quarantine record and last health check where it decides the device's health.
// internal/archtest's TestInventoryThroughOps keeps them off host.Scan. The reference is
// docs/kubevirt.md.
package kube
