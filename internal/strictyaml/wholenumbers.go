package strictyaml

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
)

// checkWholeNumbers finds YAML floats given for integer fields. yaml.v3 decodes `vcpus: 1.5`
// into an int by truncating it to 1 (and `1e1` to 10) without an error; a spec that says 1.5
// CPUs is a mistake to report, not to round. It walks the YAML tree beside the Go type of v.
func checkWholeNumbers(doc *yaml.Node, v any) error {
	if doc == nil {
		return nil
	}
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	return walkWholeNumbers(n, reflect.TypeOf(v), "", 0)
}

// unmarshalerType is yaml.Unmarshaler's type. A function: a package-level reflect call would
// run at every start of every binary that links the package.
func unmarshalerType() reflect.Type { return reflect.TypeFor[yaml.Unmarshaler]() }

func walkWholeNumbers(n *yaml.Node, t reflect.Type, path string, depth int) error {
	if n == nil || depth > 64 {
		return nil
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil && depth < 64 {
		n, depth = n.Alias, depth+1
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType()) {
		return nil // decodes itself (Size): its own errors
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" {
			return fmt.Errorf("parse spec: line %d: %s: %s is not a whole number: %w", n.Line, path, n.Value, host.ErrInvalid)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				if err := walkWholeNumbers(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if err := walkWholeNumbers(n.Content[i+1], t.Elem(), joinKey(path, n.Content[i].Value), depth+1); err != nil {
					return err
				}
			}
		}
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if ft, ok := fields[k]; ok {
				if err := walkWholeNumbers(n.Content[i+1], ft, joinKey(path, k), depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// yamlFields maps each YAML key of struct t (inline structs included) to its field's type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
