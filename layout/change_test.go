package layout

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/mdev"
)

// TestChangeJSONKeepsItsShape: a HostChange and a Done marshal to the same bytes they did before
// changes were typed (action, target, detail, instances; result, created), the Op stays out,
// and the JSON reads back.
func TestChangeJSONKeepsItsShape(t *testing.T) {
	c := newChange(CreateMdev{Parent: "mbochs", Type: "mbochs-medium", Count: 1, UUIDs: []string{"u1"}}, "mbochs", "1× mbochs-medium (defined, start=auto)", []string{"u1"})
	d := Done{HostChange: c, Result: "done", Created: []string{"u1"}}
	for _, tc := range []struct {
		v    any
		want string
	}{
		{c, `{"action":"create-mdev","target":"mbochs","detail":"1× mbochs-medium (defined, start=auto)","instances":["u1"]}`},
		{d, `{"action":"create-mdev","target":"mbochs","detail":"1× mbochs-medium (defined, start=auto)","instances":["u1"],"result":"done","created":["u1"]}`},
		{newChange(Bind{Addrs: []host.Address{host.MustParseAddress("0000:01:00.0")}}, "0000:01:00.0", "g", nil),
			`{"action":"bind","target":"0000:01:00.0","detail":"g"}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("marshal %T:\n got %s (%v)\nwant %s", tc.v, b, err, tc.want)
		}
	}
	var back Done
	if b, _ := json.Marshal(d); json.Unmarshal(b, &back) != nil || back.Action != ActCreateMdev || back.Op != nil || back.Created[0] != "u1" {
		t.Fatalf("read back %+v", back)
	}
}

// TestEveryActionHasItsOp: each action a plan orders (phase) is made by exactly one Op type,
// and every change a plan makes carries the Op of its action.
func TestEveryActionHasItsOp(t *testing.T) {
	ops := []Op{RemoveMdev{}, UndefineMdev{}, ClearVGPU{}, SetVFs{}, PersistVFs{}, ChangeMIG{}, SetVGPU{},
		CreateMdev{}, DefineMdev{}, Bind{}, PersistBind{}, Unbind{}}
	seen := map[string]bool{}
	for _, op := range ops {
		if _, ok := phase.Get()[op.Action()]; !ok || seen[op.Action()] {
			t.Errorf("%T: action %q is not in phase, or made by two types", op, op.Action())
		}
		seen[op.Action()] = true
	}
	if len(seen) != len(phase.Get()) {
		t.Errorf("%d actions have an Op, phase orders %d", len(seen), len(phase.Get()))
	}
	l := newLab(t)
	f := mustParse(t, labLayout)
	for _, name := range []string{"mixed", "smaller", "clear"} {
		for _, c := range l.plan(t, f, name).Changes {
			if c.Op == nil || c.Op.Action() != c.Action {
				t.Errorf("%s: change %s has op %T", name, c.Action, c.Op)
			}
		}
		l.apply(t, f, name)
	}
}

// TestApplyWithoutOpIsRefused: a HostChange with no Op (one read back from JSON) is not applied:
// host.ErrInvalid naming the action, and what came before it is undone.
func TestApplyWithoutOpIsRefused(t *testing.T) {
	l := newLab(t)
	plan := &HostPlan{Config: "x", Changes: []HostChange{
		newChange(SetVFs{PF: l.nvme, Count: 2, Driver: mdev.DriverKeep}, l.nvme.String(), "0 → 2 VFs", nil),
		{Action: "frobnicate", Target: "t", Detail: "d"},
	}}
	res, err := Apply(context.Background(), l.h, plan, ApplyOptions{})
	if !errors.Is(err, host.ErrInvalid) || res.Done[0].Result != "undone" {
		t.Fatalf("apply: %v, done %+v", err, res.Done)
	}
	if pf, _ := l.h.Mdev.ReadPF(l.nvme); pf.NumVFs != 0 {
		t.Fatalf("%d VFs left after the undo", pf.NumVFs)
	}
}
