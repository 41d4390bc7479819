// Package nvmlfacts captures what NVML answers on a real machine (Capture, the helper's
// `vgpu-host-nvml --facts`) and replays such a capture (Server, VGPU_HOST_NVML_FACTS), in the
// format of ../shared/fixtures/nvidia-h200/nvml-facts.json (docs/mig.md). A capture is the
// reference the stand-ins for NVML answer to; replaying one lets anybody reproduce a GPU host
// from its snapshot (`vgpu-host host snapshot`) on a machine without that GPU.
//
// The replay never touches a GPU, so unlike go-nvml's dgxa100 mock (mig/nvmlmig/mocknvml,
// test build only) it is linked into the release helper.
package nvmlfacts
