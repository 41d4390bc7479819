package nvmlmig

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/host/hosttest"
	"github.com/vgpu-host/vgpu-host/mig"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/mocknvml"
	"github.com/vgpu-host/vgpu-host/mig/nvmlmig/nvmlfacts"
	"github.com/vgpu-host/vgpu-host/vgpu"
)

// realGPUs are the real GPUs whose NVML answers were captured read-only, MIG off, with
// nvidia-smi's listings of the same GPU (hosttest.Capture): the H200 of ../shared/fixtures and
// the H100 of testdata/nvidia-h100.
var realGPUs = []struct{ capture, name string }{
	{"nvidia-h200", "NVIDIA H200"},
	{"nvidia-h100", "NVIDIA H100 80GB HBM3"},
}

// h200 is the replay of a real H200's NVML answers (../shared/fixtures/nvidia-h200), MIG off
// as captured.
func h200(t *testing.T) (*nvmlfacts.Server, mig.Backend) {
	t.Helper()
	return replay(t, "nvidia-h200")
}

// replay is the replay of the NVML answers of the real GPU captured in capture.
func replay(t *testing.T, capture string) (*nvmlfacts.Server, mig.Backend) {
	t.Helper()
	f, err := nvmlfacts.Load(hosttest.Capture(t, capture+"/nvml-facts.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := nvmlfacts.NewServer(f)
	if err := Init(s); err != nil {
		t.Fatal(err)
	}
	return s, New(s)
}

// smiProfile is one GPU-instance profile as nvidia-smi mig -lgip and -lgipp print it.
type smiProfile struct {
	name              string
	pos               int // its place in -lgip's listing, from 0
	id, free, total   int
	starts            []int
	size              int
	placementsPrinted bool
}

// nvidiaSMI parses the capture of nvidia-smi mig -lgip / -lgipp on a real GPU, by profile ID.
func nvidiaSMI(t *testing.T, capture string) map[int]*smiProfile {
	t.Helper()
	fh, err := os.Open(hosttest.Capture(t, capture+"/nvidia-smi-mig.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	// |   0  MIG 1g.18gb         19     7/7        16.00      No     16     1     0   |
	lgip := regexp.MustCompile(`^\|\s+0\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s`)
	// GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
	lgipp := regexp.MustCompile(`^GPU\s+0\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)`)
	out := map[int]*smiProfile{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if m := lgip.FindStringSubmatch(sc.Text()); m != nil {
			p := &smiProfile{name: m[1], pos: len(out)}
			p.id, _ = strconv.Atoi(m[2])
			p.free, _ = strconv.Atoi(m[3])
			p.total, _ = strconv.Atoi(m[4])
			out[p.id] = p
		}
		if m := lgipp.FindStringSubmatch(sc.Text()); m != nil {
			id, _ := strconv.Atoi(m[1])
			p := out[id]
			if p == nil {
				t.Fatalf("-lgipp lists profile ID %d that -lgip does not", id)
			}
			for _, s := range strings.Split(m[2], ",") {
				n, _ := strconv.Atoi(s)
				p.starts = append(p.starts, n)
			}
			p.size, _ = strconv.Atoi(m[3])
			p.placementsPrinted = true
		}
	}
	if len(out) != 7 {
		t.Fatalf("parsed %d profiles from nvidia-smi-mig.txt, want 7", len(out))
	}
	return out
}

// The replay of each real GPU gives exactly what nvidia-smi printed on the same GPU: every
// profile (none dropped), its name, its ID, its instance count and its placements in memory
// slices.
func TestProfilesAsNvidiaSMI(t *testing.T) {
	for _, gpu := range realGPUs {
		t.Run(gpu.capture, func(t *testing.T) { profilesAsNvidiaSMI(t, gpu.capture, gpu.name) })
	}
}

func profilesAsNvidiaSMI(t *testing.T, capture, name string) {
	_, b := replay(t, capture)
	st, err := b.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GPUs) != 1 {
		t.Fatalf("%d GPUs, want 1", len(st.GPUs))
	}
	g := st.GPUs[0]
	if g.Address != "0000:00:06.0" || g.Name != name || !g.Capable || g.Enabled || g.ComputeSlices != 7 || g.MemorySlices != 8 {
		t.Errorf("GPU: %+v", g)
	}
	smi := nvidiaSMI(t, capture)
	seen := map[int]bool{}
	for i, p := range g.Profiles {
		want := smi[p.ID]
		if want == nil {
			t.Errorf("vgpu-host lists %s (ID %d), nvidia-smi does not", p.Name, p.ID)
			continue
		}
		if want.pos != i { // mig show and inspect list them as nvidia-smi does (mig.SortProfiles)
			t.Errorf("vgpu-host lists %s %d. in its profiles, nvidia-smi mig -lgip %d.", p.Name, i+1, want.pos+1)
		}
		seen[p.ID] = true
		var starts []int
		size := 0
		for _, pl := range p.Placements {
			starts = append(starts, pl.Start)
			if size != 0 && pl.Size != size {
				t.Errorf("%s: placements of different sizes: %v", p.Name, p.Placements)
			}
			size = pl.Size
		}
		if p.Name != want.name || p.Max != want.total || fmt.Sprint(starts) != fmt.Sprint(want.starts) || size != want.size || p.MemorySlices != want.size {
			t.Errorf("profile ID %d: vgpu-host %s ×%d at %v:%d (%d memory slices); nvidia-smi %s ×%d at %v:%d",
				p.ID, p.Name, p.Max, starts, size, p.MemorySlices, want.name, want.total, want.starts, want.size)
		}
		if c, _ := strconv.Atoi(strings.SplitN(want.name, "g", 2)[0]); p.ComputeSlices != c {
			t.Errorf("%s: %d compute slices, want %d", p.Name, p.ComputeSlices, c)
		}
		// On the empty GPU every instance nvidia-smi counts free fits (mig show's FITS NOW).
		if n, _ := mig.Capacity(g, p.Name, nil); n != want.free {
			t.Errorf("%s: %d fit on the empty GPU, nvidia-smi says %d free", p.Name, n, want.free)
		}
	}
	for id, p := range smi {
		if !seen[id] {
			t.Errorf("nvidia-smi lists %s (ID %d), vgpu-host does not", p.name, id)
		}
	}
}

// The IDs the corrected dgxa100 mock reports are the ones each real GPU reports for the same
// profile index: a capture wins over a mock.
func TestMockProfileIDsMatchTheCapture(t *testing.T) {
	mock := mocknvml.DGXA100().Devices[0]
	for _, gpu := range realGPUs {
		f, err := nvmlfacts.Load(hosttest.Capture(t, gpu.capture+"/nvml-facts.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.GPUs[0].Profiles {
			if p.Info == nil {
				if _, ok := mocknvml.ProfileIDs[p.Index]; ok {
					t.Errorf("%s: index %d: the mock has an ID, the real GPU does not offer it", gpu.name, p.Index)
				}
				continue
			}
			if id, ok := mocknvml.ProfileIDs[p.Index]; !ok || id != p.Info.Id {
				t.Errorf("%s: index %d: mock ID %d (%v), the real GPU's %d", gpu.name, p.Index, id, ok, p.Info.Id)
			}
			if info, ret := mock.GetGpuInstanceProfileInfo(p.Index); ret == nvml.SUCCESS && info.Id != p.Info.Id {
				t.Errorf("%s: index %d: dgxa100 reports ID %d, the real GPU %d", gpu.name, p.Index, info.Id, p.Info.Id)
			}
		}
	}
}

// replayInstances lists the replay's GPU instances as "profile-ID@start:size", sorted.
func replayInstances(s *nvmlfacts.Server) string {
	var out []string
	for _, in := range s.State().GPUs[0].Instances {
		out = append(out, fmt.Sprintf("%d@%d:%d", in.ProfileID, in.Start, in.Size))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// Lists that fit on an H200 plan and apply on its replay, at NVIDIA's placements, with a
// compute instance in each; lists that do not are refused before any change.
func TestH200PlanAndApply(t *testing.T) {
	planAndApply(t, "nvidia-h200", []planApply{
		{[]string{"3g.71gb", "3g.71gb"}, "9@0:4 9@4:4"},
		{[]string{"1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb"}, "19@0:1 19@1:1 19@2:1 19@3:1 19@4:1 19@5:1 19@6:1"},
		{[]string{"2g.35gb", "1g.35gb", "1g.35gb"}, "14@0:2 15@2:2 15@4:2"},
		{[]string{"MIG 4g.71gb", "9"}, "5@0:4 9@4:4"},
		{[]string{"7g.141gb"}, "0@0:8"},
		{[]string{"1g.18gb+me", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb", "1g.18gb"}, "19@1:1 19@2:1 19@3:1 19@4:1 19@5:1 19@6:1 20@0:1"},
	}, []planRefused{
		{[]string{"4g.71gb", "4g.71gb"}, "2× 4g.71gb do not fit: it holds at most 1"},
		{[]string{"1g.18gb+me", "1g.18gb+me"}, "2× 1g.18gb+me do not fit: it holds at most 1"},
		{[]string{"1g.35gb", "1g.35gb", "1g.35gb", "1g.35gb", "1g.18gb"}, "1g.18gb does not fit"},
		{[]string{"4g.71gb", "3g.71gb", "1g.18gb"}, "does not fit"},
		{[]string{"3g.40gb"}, "did you mean"},
	})
}

// The same on the real H100 (testdata/nvidia-h100), by the names nvidia-smi printed there,
// its smallest profiles (1g.10gb, 1g.20gb) included.
func TestH100PlanAndApply(t *testing.T) {
	planAndApply(t, "nvidia-h100", []planApply{
		{[]string{"3g.40gb", "3g.40gb"}, "9@0:4 9@4:4"},
		{[]string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, "19@0:1 19@1:1 19@2:1 19@3:1 19@4:1 19@5:1 19@6:1"},
		{[]string{"1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb"}, "15@0:2 15@2:2 15@4:2 15@6:2"},
		{[]string{"2g.20gb", "1g.20gb", "1g.20gb"}, "14@0:2 15@2:2 15@4:2"},
		{[]string{"MIG 4g.40gb", "9"}, "5@0:4 9@4:4"},
		{[]string{"7g.80gb"}, "0@0:8"},
		{[]string{"1g.10gb+me", "2g.20gb", "3g.40gb"}, "14@4:2 20@6:1 9@0:4"},
	}, []planRefused{
		{[]string{"4g.40gb", "4g.40gb"}, "2× 4g.40gb do not fit: it holds at most 1"},
		{[]string{"1g.10gb+me", "1g.10gb+me"}, "2× 1g.10gb+me do not fit: it holds at most 1"},
		{[]string{"1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb", "1g.10gb"}, "1g.10gb does not fit"},
		{[]string{"7g.80gb", "1g.10gb"}, "does not fit"},
		{[]string{"3g.71gb"}, "did you mean"},
	})
}

// planApply is a list of profiles that fits, and the GPU instances NVML then holds as
// "profile-ID@start:size", sorted.
type planApply struct {
	want []string
	got  string
}

// planRefused is a list of profiles that does not fit, and what the refusal says.
type planRefused struct {
	want []string
	msg  string
}

// planAndApply plans and applies each fitting list on a fresh replay of capture, checks what
// NVML holds then and that planning again changes nothing; and checks each refused list is
// refused before any change.
func planAndApply(t *testing.T, capture string, fits []planApply, refused []planRefused) {
	t.Helper()
	ctx := context.Background()
	const gpu = "0000:00:06.0"
	for _, tc := range fits {
		s, b := replay(t, capture)
		st, err := b.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, err := mig.Plan(st, map[string][]string{gpu: tc.want})
		if err != nil {
			t.Errorf("plan %v: %v", tc.want, err)
			continue
		}
		if err := mig.Apply(ctx, b, c); err != nil {
			t.Errorf("apply %v: %v", tc.want, err)
			continue
		}
		if got := replayInstances(s); got != tc.got {
			t.Errorf("apply %v: NVML holds %s, want %s", tc.want, got, tc.got)
		}
		for _, in := range s.State().GPUs[0].Instances {
			if in.ComputeInstances != 1 {
				t.Errorf("apply %v: GPU instance %d has %d compute instances", tc.want, in.ID, in.ComputeInstances)
			}
		}
		st, _ = b.State(ctx)
		if again, err := mig.Plan(st, map[string][]string{gpu: tc.want}); err != nil || !again.Empty() {
			t.Errorf("plan %v again: %v, %v", tc.want, again.Steps, err)
		}
	}
	_, b := replay(t, capture)
	st, _ := b.State(ctx)
	for _, tc := range refused {
		if _, err := mig.Plan(st, map[string][]string{gpu: tc.want}); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("plan %v: %v, want an error containing %q", tc.want, err, tc.msg)
		}
	}
}

// The replay keeps NVIDIA's rules when asked to create directly, as NVML does.
func TestH200ReplayRules(t *testing.T) {
	s, b := h200(t)
	ctx := context.Background()
	d, _ := s.DeviceGetHandleByIndex(0)
	info3g, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if _, ret := d.CreateGpuInstanceWithPlacement(&info3g, &nvml.GpuInstancePlacement{Start: 0, Size: 4}); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("create with MIG off: %v", ret)
	}
	if _, ret := d.GetGpuInstances(&info3g); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("list instances with MIG off: %v", ret)
	}
	if err := b.SetMode(ctx, "0000:00:06.0", true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pl   nvml.GpuInstancePlacement
		want nvml.Return
	}{
		{nvml.GpuInstancePlacement{Start: 2, Size: 4}, nvml.ERROR_INVALID_ARGUMENT},
		{nvml.GpuInstancePlacement{Start: 4, Size: 4}, nvml.SUCCESS},
		{nvml.GpuInstancePlacement{Start: 4, Size: 4}, nvml.ERROR_INSUFFICIENT_RESOURCES},
	} {
		if _, ret := d.CreateGpuInstanceWithPlacement(&info3g, &tc.pl); ret != tc.want {
			t.Errorf("create 3g.71gb at %+v: %v, want %v", tc.pl, ret, tc.want)
		}
	}
	if n, _ := d.GetGpuInstanceRemainingCapacity(&info3g); n != 1 {
		t.Errorf("remaining 3g.71gb: %d, want 1", n)
	}
	info1g, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if _, ret := d.CreateGpuInstanceWithPlacement(&info1g, &nvml.GpuInstancePlacement{Start: 5, Size: 1}); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("1g.18gb over the 3g.71gb: %v", ret)
	}
	// Through the backend: a create over a held slice is refused naming the holder.
	_, err := b.Create(ctx, "0000:00:06.0", "1g.18gb", 4)
	if !errors.Is(err, host.ErrBusy) || !strings.Contains(err.Error(), "3g.71gb") {
		t.Errorf("create 1g.18gb at 4: %v", err)
	}
	if err := b.SetMode(ctx, "0000:00:06.0", false); !errors.Is(err, host.ErrBusy) {
		t.Errorf("disable MIG with an instance: %v", err)
	}
	// The state survives a save and a restore, ids and all.
	path := t.TempDir() + "/state.json"
	if err := s.SaveState(path); err != nil {
		t.Fatal(err)
	}
	s2, _ := h200(t)
	if err := s2.LoadState(path); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s2.State()) != fmt.Sprint(s.State()) {
		t.Errorf("restored %v, saved %v", s2.State(), s.State())
	}
}

// Without NVML (mdev place on a MIG-backed vGPU type read from sysfs) placement uses NVIDIA's
// documented geometry: on the H200 and the H100 it gives what the real GPU reports, and the
// types NVIDIA names for them (H200X-3-71C, H200X-1-18CME, H100XM-1-20C, …) find their
// profiles.
func TestDocumentedGeometryAndVGPUTypes(t *testing.T) {
	types := map[string]map[string]string{
		"nvidia-h200": {"NVIDIA H200X-3-71C": "3g.71gb", "H200X-1-18CME": "1g.18gb+me", "H200X-1-35C": "1g.35gb", "H200X-7-141C": "7g.141gb"},
		"nvidia-h100": {"NVIDIA H100XM-3-40C": "3g.40gb", "H100XM-1-10CME": "1g.10gb+me", "H100XM-1-20C": "1g.20gb", "H100XM-1-10C": "1g.10gb", "H100XM-7-80C": "7g.80gb"},
	}
	for _, gpu := range realGPUs {
		t.Run(gpu.capture, func(t *testing.T) { documentedGeometry(t, gpu.capture, types[gpu.capture]) })
	}
}

func documentedGeometry(t *testing.T, capture string, types map[string]string) {
	if len(types) == 0 {
		t.Fatalf("no vGPU type names for %s", capture)
	}
	_, b := replay(t, capture)
	st, err := b.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g := st.GPUs[0]
	documentedAsNVML(t, g)
	for typ, want := range types {
		prof, _, ok := vgpu.MIGBacking(typ)
		p, err := g.LookupProfile(prof)
		if !ok || err != nil || p.Name != want {
			t.Errorf("%s: profile %q (%v), %s, %v; want %s", typ, prof, ok, p.Name, err, want)
		}
	}
}

// Every profile name nvidia-smi printed on each real GPU parses as the name it is, as
// nvidia-smi wrote it ("MIG 1g.18gb+me") and bare, with the compute slices its name starts
// with: ParseProfile's hand matcher (mig.profileName) on the captures, not only on the names
// its own tests list.
func TestNvidiaSMINamesParse(t *testing.T) {
	for _, gpu := range realGPUs {
		t.Run(gpu.capture, func(t *testing.T) {
			for _, p := range nvidiaSMI(t, gpu.capture) {
				slices, _ := strconv.Atoi(strings.SplitN(p.name, "g", 2)[0])
				for _, s := range []string{"MIG " + p.name, p.name} {
					r, err := mig.ParseProfile(s)
					if err != nil || r.Name != strings.ToLower(p.name) || r.ID != -1 || r.ComputeSlices != slices {
						t.Errorf("ParseProfile(%q) = %+v, %v; want %s with %d slices", s, r, err, p.name, slices)
					}
				}
			}
		})
	}
}

// The virtualization mode State reports for each real GPU, from its replayed NVML answers, is
// the one nvidia-smi -q printed on the same machine ("Virtualization Mode : Pass-Through": both
// are cloud VMs with the GPU passed through); go-nvml's DGX A100 mock is bare metal ("None").
func TestVirtualizationModeAgreesWithNvidiaSMI(t *testing.T) {
	t.Parallel()
	for _, c := range realGPUs {
		t.Run(c.capture, func(t *testing.T) {
			t.Parallel()
			q, err := os.ReadFile(hosttest.Capture(t, c.capture+"/nvidia-smi-q.txt"))
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			for _, line := range strings.Split(string(q), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "Virtualization Mode" {
					want = strings.TrimSpace(v)
					break
				}
			}
			if want == "" {
				t.Fatalf("nvidia-smi -q of %s has no Virtualization Mode", c.capture)
			}
			_, b := replay(t, c.capture)
			st, err := b.State(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := st.GPUs[0].Virtualization; got != want {
				t.Errorf("virtualization %q, nvidia-smi -q %q", got, want)
			}
		})
	}
	st, err := New(mocknvml.DGXA100()).State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GPUs[0].Virtualization; got != "None" {
		t.Errorf("the DGX A100 mock: virtualization %q, want None", got)
	}
}
