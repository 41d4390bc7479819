package strictyaml

import (
	"math"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/internal/testenv"
)

// TestYAMLIsThePatchedCopy: the module builds gopkg.in/yaml.v3 from third_party/yaml.v3
// (go.mod's replace), whose resolve tables and regexps are built on first use instead of by
// its package initialiser at every start (#32; third_party/yaml.v3/VGPU-HOST.md).
func TestYAMLIsThePatchedCopy(t *testing.T) {
	out, err := exec.Command(testenv.GoTool(), "list", "-m", "-f", "{{with .Replace}}{{.Path}}{{end}}", "gopkg.in/yaml.v3").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m gopkg.in/yaml.v3: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "./third_party/yaml.v3" {
		t.Fatalf("gopkg.in/yaml.v3 is replaced by %q, not ./third_party/yaml.v3: go.mod lost its replace (every start pays yaml.v3's initialiser again)", got)
	}
}

// TestYAMLResolvesOnFirstUse: what the patched copy's lazily built tables decide (the
// resolve table's hints, the map of YAML 1.1/1.2 words, the float regexp, the short and long
// tags, the base-60 regexp of the encoder) is what upstream's initialiser built, read from
// several goroutines at once as the agent does (the first of them builds the tables).
func TestYAMLResolvesOnFirstUse(t *testing.T) {
	type want struct {
		tag string
		val any
	}
	cases := map[string]want{
		"true": {"!!bool", true}, "True": {"!!bool", true}, "FALSE": {"!!bool", false},
		"~": {"!!null", nil}, "null": {"!!null", nil}, "NULL": {"!!null", nil}, "": {"!!null", nil},
		".inf": {"!!float", math.Inf(1)}, "+.Inf": {"!!float", math.Inf(1)}, "-.INF": {"!!float", math.Inf(-1)},
		"1.5": {"!!float", 1.5}, ".5": {"!!float", 0.5}, "1e3": {"!!float", 1000.0}, "-2.5e-1": {"!!float", -0.25},
		"12": {"!!int", 12}, "-7": {"!!int", -7}, "0x1F": {"!!int", 31}, "0o17": {"!!int", 15}, "1_000": {"!!int", 1000},
		"yes": {"!!str", "yes"}, "on": {"!!str", "on"}, "1e": {"!!str", "1e"}, "1:20": {"!!str", "1:20"},
		"2001-12-14": {"!!timestamp", time.Date(2001, 12, 14, 0, 0, 0, 0, time.UTC)},
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for in, w := range cases {
				var n yaml.Node
				if err := yaml.Unmarshal([]byte("v: "+in+"\n"), &n); err != nil {
					t.Errorf("%q: %v", in, err)
					continue
				}
				v := n.Content[0].Content[1]
				if v.ShortTag() != w.tag {
					t.Errorf("%q: tag %s, want %s", in, v.ShortTag(), w.tag)
				}
				var got map[string]any
				if err := yaml.Unmarshal([]byte("v: "+in+"\n"), &got); err != nil {
					t.Errorf("%q: %v", in, err)
					continue
				}
				if g := got["v"]; g != w.val {
					t.Errorf("%q: decoded %#v, want %#v", in, g, w.val)
				}
			}
		}()
	}
	wg.Wait()
	var nan map[string]float64
	if err := yaml.Unmarshal([]byte("v: .NaN\n"), &nan); err != nil || !math.IsNaN(nan["v"]) {
		t.Errorf(".NaN: %v, %v", nan, err)
	}
	var merged map[string]int
	if err := yaml.Unmarshal([]byte("a: &a {x: 1}\nb:\n  <<: *a\n  y: 2\n"), &map[string]any{}); err != nil {
		t.Errorf("merge key: %v", err)
	}
	if err := yaml.Unmarshal([]byte("<<: {x: 1}\ny: 2\n"), &merged); err != nil || merged["x"] != 1 || merged["y"] != 2 {
		t.Errorf("merge key: %v, %v", merged, err)
	}
	// The encoder quotes strings that would read back as something else: base-60 floats,
	// YAML 1.1 booleans, numbers.
	for in, out := range map[string]string{"1:20": "\"1:20\"\n", "true": "\"true\"\n", "12": "\"12\"\n", "yes": "\"yes\"\n", "abc": "abc\n", "1:2x": "1:2x\n"} {
		b, err := yaml.Marshal(in)
		if err != nil || string(b) != out {
			t.Errorf("Marshal(%q) = %q, %v; want %q", in, b, err, out)
		}
	}
	if got := (&yaml.Node{Kind: yaml.ScalarNode, Tag: "tag:yaml.org,2002:int"}).ShortTag(); got != "!!int" {
		t.Errorf("ShortTag of the long int tag = %q", got)
	}
	if got := (&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!merge"}).LongTag(); got != "tag:yaml.org,2002:merge" {
		t.Errorf("LongTag of !!merge = %q", got)
	}
}
