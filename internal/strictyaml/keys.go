package strictyaml

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxKeyErrors is how many unknown or repeated keys an error lists; the rest are counted.
const maxKeyErrors = 20

// keyProblems is what checkKeys found: the first maxKeyErrors messages and how many more.
type keyProblems struct {
	msgs []string
	more int
}

func (p *keyProblems) add(format string, a ...any) {
	if len(p.msgs) < maxKeyErrors {
		p.msgs = append(p.msgs, fmt.Sprintf(format, a...))
		return
	}
	p.more++
}

// String joins the messages, "; and N more" after them.
func (p *keyProblems) String() string {
	s := strings.Join(p.msgs, "; ")
	if p.more > 0 {
		s += fmt.Sprintf("; and %d more unknown or repeated keys", p.more)
	}
	return s
}

// checkKeys finds the keys yaml.v3's strict decode (KnownFields) would refuse, in one pass over
// the tree: a key of a struct that has no such field ("unknown field") and a key repeated in a
// mapping. yaml.v3 finds repeated keys by comparing every key of a mapping with every later one,
// and DecodeStrict then explained each unknown key by scanning every line: a 1 MiB spec of 80k
// unknown keys cost 50 s of CPU. Here each mapping is one map lookup per key, and an error lists
// the first maxKeyErrors problems and counts the rest; DecodeStrict stops before yaml.v3 sees
// such a document.
//
// It is conservative: where it cannot tell what yaml.v3 would accept (a type with its own
// UnmarshalYAML, an ",inline" map, an interface, an alias) it does not look further, and
// yaml.v3's own check still applies there.
func checkKeys(doc *yaml.Node, v any) *keyProblems {
	p := &keyProblems{}
	if doc == nil {
		return p
	}
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return p
		}
		n = n.Content[0]
	}
	fields := map[reflect.Type]structKeys{}
	walkKeys(n, reflect.TypeOf(v), "", 0, fields, p)
	return p
}

// structKeys is a struct's YAML keys (inline structs included) and whether an inline map
// or a field that decodes itself inline takes any other key.
type structKeys struct {
	keys   map[string]reflect.Type
	anyKey bool
}

func walkKeys(n *yaml.Node, t reflect.Type, path string, depth int, cache map[reflect.Type]structKeys, p *keyProblems) {
	if n == nil || t == nil || depth > 64 || n.Kind == yaml.AliasNode {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if decodesItself(t) {
		return
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				if c.Kind == yaml.MappingNode || c.Kind == yaml.SequenceNode {
					walkKeys(c, t.Elem(), path+"["+strconv.Itoa(i)+"]", depth+1, cache, p)
				}
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode && !repeatedKeys(n, p) {
			for i := 0; i+1 < len(n.Content); i += 2 {
				walkKeys(n.Content[i+1], t.Elem(), joinKey(path, n.Content[i].Value), depth+1, cache, p)
			}
		}
	case reflect.Struct:
		if n.Kind != yaml.MappingNode || repeatedKeys(n, p) {
			return
		}
		sk, ok := cache[t]
		if !ok {
			sk = structKeys{keys: map[string]reflect.Type{}}
			collectKeys(t, &sk, 0)
			cache[t] = sk
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Value == "<<" {
				continue // a merge key or a complex key: yaml.v3 judges it
			}
			ft, known := sk.keys[k.Value]
			switch {
			case known:
				walkKeys(n.Content[i+1], ft, joinKey(path, k.Value), depth+1, cache, p)
			case !sk.anyKey:
				p.add("line %d: unknown field %q at %s", k.Line, k.Value, joinKey(path, k.Value))
			}
		}
	}
}

// repeatedKeys reports the keys of mapping n that an earlier key of n repeats (yaml.v3's rule:
// the same kind and value) and says whether there were any; yaml.v3 then decodes nothing
// under n, so neither does walkKeys.
func repeatedKeys(n *yaml.Node, p *keyProblems) bool {
	type key struct {
		kind  yaml.Kind
		value string
	}
	seen := make(map[key]int, len(n.Content)/2)
	found := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" {
			continue
		}
		if first, dup := seen[key{k.Kind, k.Value}]; dup {
			p.add("line %d: mapping key %q already defined at line %d", k.Line, k.Value, first)
			found = true
			continue
		}
		seen[key{k.Kind, k.Value}] = k.Line
	}
	return found
}

// collectKeys adds struct t's YAML keys to sk the way yaml.v3 (getStructInfo) names them: the
// yaml tag's name, else the lower-cased field name; "-" skipped; ",inline" structs merged.
func collectKeys(t reflect.Type, sk *structKeys, depth int) {
	if depth > 16 {
		sk.anyKey = true
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.PkgPath != "" && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "" && !strings.Contains(string(f.Tag), ":") {
			tag = string(f.Tag)
		}
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() != reflect.Struct || decodesItself(ft) {
				sk.anyKey = true // an inline map, or a struct that decodes the mapping itself
				continue
			}
			collectKeys(ft, sk, depth+1)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		sk.keys[name] = f.Type
	}
}

// decodesItself says whether yaml.v3 hands a node of type t to the type's own UnmarshalYAML
// (yaml.v3's Unmarshaler, or the older yaml.v2-style one), or to an interface value.
func decodesItself(t reflect.Type) bool {
	if t.Kind() == reflect.Interface {
		return true
	}
	_, own := reflect.PointerTo(t).MethodByName("UnmarshalYAML")
	return own || reflect.PointerTo(t).Implements(unmarshalerType())
}
