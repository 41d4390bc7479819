package layout

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

const head = "apiVersion: vgpu-host/v1\nkind: HostLayout\nconfigs:\n"

// TestParseErrorsNameLineAndField: every malformed layout is host.ErrInvalid and the message
// names the line and the field (or the reason) of the mistake; a field the file lacks (mdev
// without types) at the line of the entry that lacks it (strictyaml.LineOf: it had no line).
func TestParseErrorsNameLineAndField(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string
	}{
		{"unknown field", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\"}\n        mode: host\n        colour: red\n",
			[]string{"line 8", `unknown field "colour"`, "configs.a.gpus[0].colour"}},
		{"unknown top field", head + "  a:\n    gpus: []\nextra: 1\n", []string{"line 6", `unknown field "extra"`}},
		{"duplicate config", head + "  a:\n    gpus: []\n  a:\n    gpus: []\n", []string{"line 6", `"a" already defined at line 4`}},
		{"wrong type", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\"}\n        mode: sriov\n        vfs: three\n",
			[]string{"line 8", "configs.a.gpus[0].vfs", "want an integer"}},
		{"fraction", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\"}\n        mode: sriov\n        vfs: 2.5\n",
			[]string{"line 8", "vfs"}},
		{"bad apiVersion", "apiVersion: v2\nkind: HostLayout\nconfigs:\n  a:\n    gpus: []\n", []string{"line 1", "apiVersion", `want "vgpu-host/v1"`}},
		{"bad kind", "apiVersion: vgpu-host/v1\nkind: VirtualMachine\nconfigs:\n  a:\n    gpus: []\n", []string{"line 2", "kind"}},
		{"no configs", "apiVersion: vgpu-host/v1\nkind: HostLayout\n", []string{"configs", "no configurations"}},
		{"bad mode", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\"}\n        mode: split\n",
			[]string{"line 7", "configs.a.gpus[0].mode", `"split"`, "passthrough, sriov, mdev"}},
		{"two selector kinds", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\", model: A100}\n        mode: host\n",
			[]string{"line 6", "configs.a.gpus[0].select", "exactly one"}},
		{"bad address", head + "  a:\n    gpus:\n      - select: {address: \"zz:00.0\"}\n        mode: host\n",
			[]string{"configs.a.gpus[0].select.address"}},
		{"vendor without device", head + "  a:\n    gpus:\n      - select: {vendor: \"10de\"}\n        mode: host\n",
			[]string{"line 6", "configs.a.gpus[0].select.device", "4-digit hex"}},
		{"sriov without vfs", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\"}\n        mode: sriov\n",
			[]string{"line 6", "configs.a.gpus[0].vfs", "needs vfs"}},
		{"types on passthrough", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\"}\n        mode: passthrough\n        types: [{type: x, count: 1}]\n",
			[]string{"line 8", "configs.a.gpus[0].types", "not used by mode passthrough"}},
		{"mdev without types", head + "  a:\n    gpus:\n      - select: {parent: mbochs}\n        mode: mdev\n",
			[]string{"line 6", "configs.a.gpus[0].types", "at least one type"}},
		{"zero count", head + "  a:\n    gpus:\n      - select: {parent: mbochs}\n        mode: mdev\n        types: [{type: small, count: 0}]\n",
			[]string{"line 8", "configs.a.gpus[0].types[0].count", "want 1..1024"}},
		{"type twice", head + "  a:\n    gpus:\n      - select: {parent: mbochs}\n        mode: mdev\n        types: [{type: small, count: 1}, {type: Small, count: 2}]\n",
			[]string{"configs.a.gpus[0].types[1].type", "listed twice"}},
		{"vendor more than vfs", head + "  a:\n    gpus:\n      - select: {address: \"41:00.0\"}\n        mode: vendor-vfio\n        vfs: 2\n        types: [{type: L40S-8Q, count: 3}]\n",
			[]string{"configs.a.gpus[0].types", "need 3 VFs"}},
		{"bad MIG profile", head + "  a:\n    gpus:\n      - select: {address: \"41:00.0\"}\n        mode: mig\n        profiles: [{profile: big, count: 1}]\n",
			[]string{"configs.a.gpus[0].profiles[0].profile", "1g.10gb"}},
		{"MIG too many slices", head + "  a:\n    gpus:\n      - select: {address: \"41:00.0\"}\n        mode: mig\n        profiles: [{profile: 4g.40gb, count: 2}, {profile: 1g.10gb, count: 1}]\n",
			[]string{"configs.a.gpus[0].profiles", "9 compute slices"}},
		{"same selector twice", head + "  a:\n    gpus:\n      - select: {address: \"01:00.0\"}\n        mode: host\n      - select: {address: \"0000:01:00.0\"}\n        mode: passthrough\n",
			[]string{"line 8", "configs.a.gpus[1].select", "as configs.a.gpus[0] does"}},
		{"two defaults", head + "  a:\n    default: true\n    gpus: []\n  b:\n    default: true\n    gpus: []\n", []string{"2 configurations are marked default"}},
		{"bad config name", head + "  \"a b\":\n    gpus: []\n", []string{"configuration name"}},
		{"two documents", head + "  a:\n    gpus: []\n---\nx: 1\n", []string{"line 6", "more than one YAML document"}},
		{"empty", "", []string{"empty document"}},
		{"too large", head + strings.Repeat("#", host.MaxSpecSize), []string{"at most"}},
		{"not yaml", "configs: [", []string{"parse layout"}},
		{"alias bomb", head + "  a: &a [x, x, x, x, x, x, x, x, x]\n" + bomb(), []string{"parse layout"}},
		{"parent that is an address", head + "  a:\n    gpus:\n      - select: {parent: \"0000:01:00.0\"}\n        mode: host\n", []string{"use address:"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil {
				t.Fatal("parsed")
			}
			if !errors.Is(err, host.ErrInvalid) {
				t.Errorf("not ErrInvalid: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestSelect: --config picks; one configuration needs no name; several need a default or a
// name; an unknown name lists the choices.
func TestSelect(t *testing.T) {
	f := mustParse(t, head+"  a:\n    gpus: []\n  b:\n    gpus: []\n")
	if _, _, err := f.Select(""); !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("no default: %v", err)
	}
	if n, _, err := f.Select("b"); err != nil || n != "b" {
		t.Fatalf("select b: %s %v", n, err)
	}
	if _, _, err := f.Select("c"); !errors.Is(err, host.ErrNotFound) || !strings.Contains(err.Error(), "a, b") {
		t.Fatalf("unknown: %v", err)
	}
	f = mustParse(t, head+"  a:\n    gpus: []\n  b:\n    default: true\n    gpus: []\n")
	if n, _, err := f.Select(""); err != nil || n != "b" {
		t.Fatalf("default: %s %v", n, err)
	}
	f = mustParse(t, head+"  only:\n    gpus: []\n")
	if n, _, err := f.Select(""); err != nil || n != "only" {
		t.Fatalf("only one: %s %v", n, err)
	}
}

// bomb is a billion-laughs chain of YAML aliases under configs.
func bomb() string {
	var b strings.Builder
	prev := "a"
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("b%d", i)
		fmt.Fprintf(&b, "  %s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	return b.String()
}
