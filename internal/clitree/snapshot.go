package clitree

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/snapshot"
	migremote "github.com/vgpu-host/vgpu-host/mig/remote"
)

// nvmlFactsName is the NVML capture's name in a snapshot (and in shared/fixtures/nvidia-h200).
const nvmlFactsName = "nvml-facts.json"

// nvmlFactsTimeout bounds `vgpu-host-nvml --facts`: NVML initialises in well under a second on
// a healthy driver, and a hung GPU must not hang the snapshot taken to report it.
const nvmlFactsTimeout = 30 * time.Second

// snapshotReport is `host snapshot -o json`.
type snapshotReport struct {
	File string `json:"file"`
	snapshot.Report
	// NVML is nvmlFactsName when the capture is in the snapshot; NVMLError says why not.
	NVML      string `json:"nvml,omitempty"`
	NVMLError string `json:"nvml_error,omitempty"`
}

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "write what vgpu-host reads of this host (sysfs subset, /proc files, NVML facts) to FILE.tar.gz; change nothing",
		ArgsUsage: "FILE.tar.gz",
		Description: "For a bug report or a test: unpack FILE and point --host-root at it, and VGPU_HOST_NVML_FACTS at its\n" +
			nvmlFactsName + ", to get this host's inspect, check, mig show and plan anywhere (docs/snapshot.md).\n" +
			"Only reads: sysfs files by content (write-only, BAR, ROM and VPD files skipped; a file over 1 MiB\n" +
			"or slower than 2 s to read is skipped and listed), links as links, serial numbers and UUIDs zeroed.\n" +
			"NVML facts come from " + migremote.HelperName + " --facts when NVML describes --host-root. FILE ending in .tar is\n" +
			"written uncompressed. Runs here, never through the agent.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "no-nvml", Usage: "leave the NVML facts out (do not start " + migremote.HelperName + ")"},
		},
		Action: runSnapshot,
	}
}

func runSnapshot(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() != 1 {
		return usageErr("host snapshot takes one FILE (.tar.gz or .tar)")
	}
	file := cmd.Args().First()
	root, err := rootOf(cmd)
	if err != nil {
		return err
	}
	rep := snapshotReport{File: file}
	extra := map[string][]byte{}
	switch {
	case cmd.Bool("no-nvml"):
		rep.NVMLError = "left out (--no-nvml)"
	case !nvmlDescribes(envOf(cmd).NVML, root):
		rep.NVMLError = nvmlNotHere(root)
	default:
		if b, err := nvmlFacts(ctx, envOf(cmd).NVML); err != nil {
			rep.NVMLError = err.Error()
		} else {
			extra[nvmlFactsName], rep.NVML = b, nvmlFactsName
		}
	}
	r, err := writeSnapshot(ctx, root, file, extra)
	rep.Report = r
	if err != nil {
		return err
	}
	return emit(cmd, rep, func(w io.Writer) error {
		fmt.Fprintf(w, "wrote %s: %d entries, %d KiB of files, %d skipped\n", file, rep.Entries, (rep.Bytes+1023)/1024, len(rep.Skipped))
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "  skipped %s: %s\n", s.Path, s.Why)
		}
		if rep.NVML != "" {
			fmt.Fprintf(w, "NVML facts: %s\n", rep.NVML)
		} else {
			fmt.Fprintf(w, "NVML facts: none: %s\n", rep.NVMLError)
		}
		return nil
	})
}

// writeSnapshot writes root's snapshot to file through a temporary file beside it, gzipped
// unless file ends in .tar.
func writeSnapshot(ctx context.Context, root host.Root, file string, extra map[string][]byte) (snapshot.Report, error) {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return snapshot.Report{}, fmt.Errorf("create snapshot %s: %w", file, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	var w io.Writer = tmp
	var zw *gzip.Writer
	if !strings.HasSuffix(file, ".tar") {
		zw = gzip.NewWriter(tmp)
		w = zw
	}
	rep, err := snapshot.Write(ctx, root, w, snapshot.Options{Extra: extra})
	if err != nil {
		return rep, err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return rep, fmt.Errorf("write snapshot %s: %w", file, err)
		}
	}
	if err := tmp.Chmod(0o644); err != nil {
		return rep, fmt.Errorf("write snapshot %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return rep, fmt.Errorf("write snapshot %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return rep, fmt.Errorf("write snapshot %s: %w", file, err)
	}
	return rep, nil
}

// nvmlFacts runs the NVML helper's --facts (found and started as nv says, as the mig commands
// find it) within nvmlFactsTimeout and returns its capture; the error says why there is none.
func nvmlFacts(ctx context.Context, nv migremote.Env) ([]byte, error) {
	h, err := nv.OpenHelper("NVML facts")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	path := h.Path
	ctx, cancel := context.WithTimeout(ctx, nvmlFactsTimeout)
	defer cancel()
	// The opened descriptor runs, not the path: one a variable named was checked on it.
	c := h.Command(ctx, "--facts")
	c.Env = nv.Environ()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("no answer in %s", nvmlFactsTimeout)
		}
		return nil, fmt.Errorf("%s --facts: %w: %s", path, err, msg)
	}
	// The helper's notes (a replay answering) go on to the user.
	os.Stderr.Write(errb.Bytes())
	return out.Bytes(), nil
}
