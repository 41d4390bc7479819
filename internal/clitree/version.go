package clitree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/virt/remote"
)

// versionReport is `vgpu-host version -o json`.
type versionReport struct {
	buildinfo.Info
	Helper helperReport `json:"helper"`
}

// helperReport says which libvirt helper vgpu-host would start and whether it is the same
// build (same version and commit).
type helperReport struct {
	Found   bool   `json:"found"`
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Matches bool   `json:"matches"`
	Error   string `json:"error,omitempty"`
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print version, commit and Go version, and whether the libvirt helper is found and the same build",
		Description: "The helper " + remote.HelperName + " is looked for in $" + remote.EnvHelper + ", beside this binary, then in\n" +
			"PATH, as the commands that talk to libvirt do. Exit 0 even when it is missing: the commands\n" +
			"that talk to libvirt need it only for a URI other than qemu:///system (which vgpu-host\n" +
			"reaches itself, over libvirtd's socket) and for the agent's connection.",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			r := versionReport{Info: buildinfo.Get(), Helper: probeHelper(ctx)}
			r.Helper.Matches = r.Helper.Found && r.Helper.Error == "" && r.Helper.Version == r.Version && r.Helper.Commit == r.Commit
			return emit(cmd, r, func(w io.Writer) error { return versionTable(w, r) })
		},
	}
}

// probeHelper finds the helper the way virt/remote does and asks it for its --version.
func probeHelper(ctx context.Context) helperReport {
	helper, err := remote.OpenHelper(remote.HelperName, remote.EnvHelper, "libvirt support", remote.ErrNoHelper)
	if err != nil {
		return helperReport{Error: err.Error()}
	}
	defer helper.Close()
	path := helper.Path
	h := helperReport{Found: true, Path: path}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := helper.Command(ctx, "--version").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		h.Error = fmt.Sprintf("run %s --version: %v", path, err)
		return h
	}
	info, err := buildinfo.ParseLine(remote.HelperName, string(out))
	if err != nil {
		h.Error = fmt.Sprintf("%s: %v (an older helper without --version?)", path, err)
		return h
	}
	h.Version, h.Commit = info.Version, info.Commit
	return h
}

func versionTable(w io.Writer, r versionReport) error {
	fmt.Fprintf(w, "vgpu-host  %s\ncommit     %s\ngo         %s\n", r.Version, r.Commit, r.Go)
	h := r.Helper
	switch {
	case !h.Found:
		fmt.Fprintf(w, "helper     not found: %s\n", h.Error)
	case h.Error != "":
		fmt.Fprintf(w, "helper     %s: %s\n", h.Path, h.Error)
	case h.Matches:
		fmt.Fprintf(w, "helper     %s (%s, commit %s: the same build)\n", h.Path, h.Version, h.Commit)
	default:
		fmt.Fprintf(w, "helper     %s (%s, commit %s: NOT the same build as vgpu-host; install both from one build)\n", h.Path, h.Version, h.Commit)
	}
	return nil
}
