module github.com/vgpu-host/vgpu-host

go 1.26.8

require (
	github.com/urfave/cli/v3 v3.14.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	libvirt.org/go/libvirtxml v1.11006.0 // indirect
)
