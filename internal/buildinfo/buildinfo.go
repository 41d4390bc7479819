// Package buildinfo holds the version and commit both binaries (vgpu-host and its libvirt
// helper vgpu-host-libvirt) are stamped with, and the one-line form the helper prints for
// `--version`, which vgpu-host parses to tell whether the helper it would start matches.
//
// The Makefile stamps them with the linker:
//
//	go build -ldflags "-X github.com/vgpu-host/vgpu-host/internal/buildinfo.version=v0.3.0 \
//	    -X github.com/vgpu-host/vgpu-host/internal/buildinfo.commit=5f1c2e9" ./cmd/...
//
// Unstamped builds (go build, go install) report version "dev" and the commit Go recorded from
// the git checkout, if any.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Stamped at link time; see the package doc.
var (
	version = "dev"
	commit  = ""
)

// Info is what a binary was built from.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
}

// Version returns the stamped version ("dev" when unstamped) without the work Get does.
func Version() string { return version }

// Get returns this binary's build information. The commit falls back to the VCS revision Go
// embeds when it builds from a git checkout ("-dirty" when the tree had changes), else
// "unknown".
func Get() Info {
	return Info{Version: version, Commit: commitOf(), Go: runtime.Version()}
}

func commitOf() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// Line is the one-line `--version` answer of a binary called name:
//
//	vgpu-host-libvirt version v0.3.0 commit 5f1c2e9 go1.26.8
func (i Info) Line(name string) string {
	return fmt.Sprintf("%s version %s commit %s %s", name, i.Version, i.Commit, i.Go)
}

// ParseLine reads back what Line wrote for the binary called name.
func ParseLine(name, line string) (Info, error) {
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != name || f[1] != "version" || f[3] != "commit" {
		return Info{}, fmt.Errorf("unexpected --version answer %q: want %q", strings.TrimSpace(line), Info{"VERSION", "COMMIT", "GO"}.Line(name))
	}
	return Info{Version: f[2], Commit: f[4], Go: f[5]}, nil
}
