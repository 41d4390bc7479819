package domains

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReadBackRandomPatches: random patch sets (set or remove an attribute, set a leaf's
// text, remove an element, add a copy of an element somewhere) on every example render the
// same domain, or fail with the same error, whether xmlPatches decodes only what they changed
// or the whole document. VGPU_READBACK_SEED=N replays a seed, VGPU_READBACK_ROUNDS=N runs
// longer. About 0.3 s.
func TestReadBackRandomPatches(t *testing.T) {
	t.Parallel()
	rounds := 40
	if s := os.Getenv("VGPU_READBACK_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	seed := uint64(3)
	if s := os.Getenv("VGPU_READBACK_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	files, _ := filepath.Glob("../examples/*.yaml")
	r := rand.New(rand.NewPCG(seed, 4))
	partial := 0
	for _, f := range files {
		vm, err := Load(f)
		if err != nil {
			continue // host layouts
		}
		alloc, err := Resolve(vm, nil, ResolveOptions{Offline: true, VirtType: "kvm"})
		if err != nil {
			t.Fatal(err)
		}
		vm.Spec.XMLPatches = nil
		d, err := Build(vm, alloc, BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		x, err := marshalCompact(d)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := parseMarshaled(x)
		if err != nil {
			t.Fatal(err)
		}
		var els []elPath
		collectPaths(doc, "/domain", &els)
		for range rounds {
			var patches []XMLPatch
			for range 1 + r.IntN(3) {
				patches = append(patches, randomPatch(r, els))
			}
			vm.Spec.XMLPatches = patches
			var out [2]string
			for i, opts := range []BuildOptions{{}, {wholeReadBack: true}} {
				s, err := Render(vm, alloc, opts)
				if err != nil {
					s = "error: " + err.Error()
				}
				out[i] = s
			}
			if out[0] != out[1] {
				t.Fatalf("%s with %+v: reading back only the changes gives\n%s\nreading the whole document\n%s", f, patches, out[0], out[1])
			}
			if !strings.HasPrefix(out[0], "error") {
				partial++
			}
		}
	}
	t.Logf("%d patch sets rendered alike both ways (the rest failed alike)", partial)
}

// elPath is an element of a rendered domain and the path that names it ([N] at every step).
type elPath struct {
	n    *xnode
	path string
}

func collectPaths(n *xnode, path string, out *[]elPath) {
	*out = append(*out, elPath{n, path})
	count := map[string]int{}
	for _, k := range n.kids {
		if c, ok := k.(*xnode); ok {
			count[c.name]++
			step := c.name + "[" + strconv.Itoa(count[c.name]) + "]"
			if c.name == "name" || c.name == "uuid" || c.name == "metadata" {
				continue // vgpu-host's own: patches may not touch them
			}
			collectPaths(c, path+"/"+step, out)
		}
	}
}

func randomPatch(r *rand.Rand, els []elPath) XMLPatch {
	values := []string{"none", "on", "1", "virtio", "x", "0x1f"}
	e := els[r.IntN(len(els))]
	switch r.IntN(5) {
	case 0: // set an attribute, existing or not
		name := []string{"type", "model", "cache", "x"}[r.IntN(4)]
		if len(e.n.attrs) > 0 && r.IntN(2) == 0 {
			name = qname(e.n.attrs[r.IntN(len(e.n.attrs))].Name)
		}
		return XMLPatch{Set: e.path + "/@" + name, Value: values[r.IntN(len(values))]}
	case 1: // set a leaf's text
		return XMLPatch{Set: e.path, Value: values[r.IntN(len(values))]}
	case 2:
		if e.path != "/domain" {
			return XMLPatch{Remove: e.path}
		}
	case 3:
		if len(e.n.attrs) > 0 {
			return XMLPatch{Remove: e.path + "/@" + qname(e.n.attrs[r.IntN(len(e.n.attrs))].Name)}
		}
	}
	// Add a copy of an element, under its own parent mostly.
	c := els[1+r.IntN(len(els)-1)]
	parent := c.path[:strings.LastIndexByte(c.path, '/')]
	if r.IntN(4) == 0 {
		parent = e.path
	}
	var b bytes.Buffer
	c.n.write(&b)
	return XMLPatch{Add: parent, XML: b.String()}
}
