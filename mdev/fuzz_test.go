package mdev

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
)

// FuzzUUID: mdev UUIDs from the command line, specs, mdevctl file names and state files, and
// the UUIDs derived from VM names. Invariant: no panic; an accepted UUID is canonical (parses
// to itself) and safe as a path component; every derived UUID is accepted.
func FuzzUUID(f *testing.F) {
	for _, s := range []string{"83c32df7-d52e-4ec1-9668-1f3c7e4df107", "83C32DF7-D52E-4EC1-9668-1F3C7E4DF107",
		"{83c32df7-d52e-4ec1-9668-1f3c7e4df107}", "urn:uuid:83c32df7-d52e-4ec1-9668-1f3c7e4df107", "83c32df7d52e4ec196681f3c7e4df107", "../../..", ""} {
		f.Add(s, "vm1", 0)
	}
	f.Add("x", "train-01", 3)
	f.Add("x", "", -1)
	f.Fuzz(func(t *testing.T, s, owner string, index int) {
		if u, err := ParseUUID(s); err == nil {
			if again, err := ParseUUID(u); err != nil || again != u {
				t.Fatalf("%q -> %q is not canonical (%q, %v)", s, u, again, err)
			}
			if err := host.CheckComponent("uuid", u); err != nil {
				t.Fatalf("accepted UUID %q is not a safe path component: %v", u, err)
			}
		}
		id := InstanceUUID(owner, index)
		if u, err := ParseUUID(id); err != nil || u != id {
			t.Fatalf("InstanceUUID(%q, %d) = %q does not parse (%v)", owner, index, id, err)
		}
	})
}

// FuzzMdevctlDefinition: a definition file under /etc/mdevctl.d that mdevctl or another tool
// wrote. Invariant: no panic; a file that does not decode is an error naming it (ErrInvalid),
// and never stops the other definitions from being read by restore. Seeds: mdevctl's own
// format and what Define writes.
func FuzzMdevctlDefinition(f *testing.F) {
	f.Add([]byte(`{"mdev_type": "nvidia-471", "start": "auto", "attrs": []}`))
	f.Add([]byte("{\n  \"mdev_type\": \"i915-GVTg_V5_4\",\n  \"start\": \"manual\",\n  \"attrs\": [\n    {\"example-attribute-1\": \"hello\"},\n    {\"example-attribute-2\": \"world\"}\n  ]\n}\n"))
	f.Add([]byte(`{"mdev_type": "mbochs-small", "start": "auto", "attrs": [{"../../x": "1"}]}`))
	f.Add([]byte(`{"mdev_type": null, "attrs": [null, {}]}`))
	f.Add([]byte(`[]`))
	id := "1b6c4a8e-1e4f-4b7a-9a43-5f2f3b1e9d10"
	// One fake tree per fuzz worker (making one takes ~50 ms); Restore runs dry, so the tree
	// stays as it is.
	tr := hosttest.New(f)
	tr.Mbochs()
	f.Fuzz(func(t *testing.T, data []byte) {
		m := New(tr.Root, &host.Recorder{})
		m.DryRun = true
		writeFuzzFile(t, tr.Root.Path("etc/mdevctl.d/mbochs/"+id), data)
		defs, err := m.Definitions()
		if err != nil {
			if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), id) {
				t.Fatalf("error does not name the file or wrap ErrInvalid: %v", err)
			}
		} else if len(defs) != 1 || defs[0].UUID != id || defs[0].Parent != "mbochs" {
			t.Fatalf("definitions %+v", defs)
		}
		steps, _ := m.Restore(t.Context())
		for _, s := range steps {
			if s.Result == "failed" && s.Error == "" {
				t.Fatalf("a failed step without a reason: %+v", s)
			}
		}
	})
}

// FuzzStateFiles: /etc/vgpu-host/sriov.json and the vGPU state file
// (/var/lib/vgpu-host/vgpu-instances.json) as found on disk. Invariant: no panic; a file that
// does not decode is an error naming it; one that decodes survives an update (the record
// written back decodes again). Seeds: files the code itself writes, and damaged ones.
func FuzzStateFiles(f *testing.F) {
	sriov, _ := json.Marshal(sriovFile{Version: 1, PFs: []PersistedPF{{Address: "0000:41:00.0", NumVFs: 4, Driver: "vfio-pci"}}})
	st, _ := json.Marshal(state{Version: 1, Instances: []stateEntry{
		{Backend: BackendMdev, Parent: "mbochs", Type: "mbochs-small", UUID: InstanceUUID("vm1", 0), Owner: "vm1"},
		{Backend: BackendNvidiaVFIO, Parent: "0000:41:00.0", Type: "1155", VF: "0000:41:00.4", Owner: "vm1", Index: 1},
	}, Autoprobe: map[string]string{"0000:41:00.0": "1"}})
	for _, b := range [][]byte{sriov, st, []byte(`{"pfs": [null, {"address": "../../x", "num_vfs": -1}]}`), []byte(`{"instances": [{"vf": "zz"}], "sriov_drivers_autoprobe": null}`), []byte(`null`), []byte(``)} {
		f.Add(b, true)
		f.Add(b, false)
	}
	tr := hosttest.New(f) // one per fuzz worker: each input replaces the file first
	f.Fuzz(func(t *testing.T, data []byte, isSRIOV bool) {
		m, _ := newMgr(tr)
		if isSRIOV {
			writeFuzzFile(t, tr.Root.Path("etc/vgpu-host/sriov.json"), data)
			if _, err := m.PersistedPFs(); err != nil {
				if !strings.Contains(err.Error(), m.SRIOVPath()) {
					t.Fatalf("error does not name the file: %v", err)
				}
				return
			}
			if err := m.persistPF(PersistedPF{Address: "0000:41:00.0", NumVFs: 1}); err != nil {
				t.Fatalf("update of a readable file: %v", err)
			}
			if _, err := m.PersistedPFs(); err != nil {
				t.Fatalf("what vgpu-host wrote does not read back: %v", err)
			}
			return
		}
		writeFuzzFile(t, tr.Root.Path("var/lib/vgpu-host/vgpu-instances.json"), data)
		if _, err := m.readState(); err != nil {
			if !strings.Contains(err.Error(), m.statePath()) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := m.updateState(func(s *state) error { s.put(stateEntry{Backend: BackendMdev, UUID: InstanceUUID("fz", 0)}); return nil }); err != nil {
			t.Fatalf("update of a readable file: %v", err)
		}
		if _, err := m.readState(); err != nil {
			t.Fatalf("what vgpu-host wrote does not read back: %v", err)
		}
		_, _ = m.Instances()
	})
}

// writeFuzzFile writes one input where the code under test reads it (the tree's own WriteFile
// would fail the whole fuzz target, not the input).
func writeFuzzFile(t *testing.T, path string, data []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
