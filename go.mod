module github.com/vgpu-host/vgpu-host

go 1.26.8

require (
	github.com/digitalocean/go-qemu v0.0.0-20250212194115-ee9b0668d242
	github.com/google/uuid v1.6.0
	github.com/urfave/cli/v3 v3.14.0
	golang.org/x/sys v0.30.0
	gopkg.in/yaml.v3 v3.0.1
	libvirt.org/go/libvirt v1.11006.0
	libvirt.org/go/libvirtxml v1.11006.0
)

require github.com/digitalocean/go-libvirt v0.0.0-20220804181439-8648fbde413e // indirect
