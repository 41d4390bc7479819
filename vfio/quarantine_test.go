package vfio

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
)

// A quarantined function is refused by bind (exit 4, naming the record and the fix), even
// with --force, and by Preflight (what plan, apply and layout ask); nothing is written.
func TestBindRefusesQuarantined(t *testing.T) {
	t.Parallel()
	tr, k, b, gpu, audio := consumer(t, "")
	q := &host.Quarantine{Address: audio, Problems: []host.Problem{{Check: host.HealthConfigOnes, Detail: "config space reads all ones"}}, Since: time.Now(), Op: "unbind"}
	if err := host.SaveQuarantine(tr.Root, q); err != nil {
		t.Fatal(err)
	}
	for _, force := range []bool{false, true} {
		_, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{Force: force})
		if !errors.Is(err, host.ErrRefused) || !errors.Is(err, host.ErrQuarantined) {
			t.Fatalf("force=%v: %v", force, err)
		}
		for _, want := range []string{"[quarantined]", "quarantine/0000:01:00.1.json", "release-quarantine", "config-all-ones"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("force=%v: error lacks %q: %v", force, want, err)
			}
		}
	}
	if w := k.Writes(); len(w) != 0 {
		t.Errorf("writes despite the refusal: %v", w)
	}
	rs, err := b.Preflight([]host.Address{gpu})
	if err != nil || !slices.ContainsFunc(rs, func(r Refusal) bool { return r.Check == CheckQuarantined && *r.Address == audio }) {
		t.Fatalf("preflight %v %v", rs, err)
	}
	if err := host.RemoveQuarantine(tr.Root, audio); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Bind(ctx, []host.Address{gpu}, BindOptions{}); err != nil {
		t.Fatalf("bind after release: %v", err)
	}
	if st, err := host.LoadHealthState(tr.Root, gpu); err != nil || st == nil || st.Baseline == nil {
		t.Errorf("bind recorded no baseline: %+v %v", st, err)
	}
}
