package jsonindent

import (
	"bytes"
	"encoding"
	"encoding/json"
	"io"
	"reflect"
	"sort"
	"strings"
)

// minSplice is the length from which a slice member is written element by element.
const minSplice = 32

// A splice is a top-level member whose array Encode writes one element at a time: its
// elements, and where its (emptied) value "[]" is in the compact encoding of the rest.
type splice struct {
	elems reflect.Value // the slice
	at    int           // offset of its "[" in the head's compact encoding
}

// marshals reports whether encoding/json would call a method of t (or *t) instead of
// encoding its fields or elements. (The interface types are found here, not in package
// variables: no package of this module runs an initialiser, TestLightBinaryInits.)
func marshals(t reflect.Type) bool {
	marshalerType, textMarshalerType := reflect.TypeFor[json.Marshaler](), reflect.TypeFor[encoding.TextMarshaler]()
	p := reflect.PointerTo(t)
	return t.Implements(marshalerType) || t.Implements(textMarshalerType) ||
		p.Implements(marshalerType) || p.Implements(textMarshalerType)
}

// plan finds the long slices among the top-level members of v, a struct or a pointer to one:
// it returns a copy of v with them emptied (the head, small) and its compact encoding, and
// where each goes. ok is false (and Encode encodes v whole) when v is anything else or when
// any member cannot be told for sure: no member is guessed at. Each slice's member is found by
// encoding/json itself: the head encoded with that slice nil instead of empty must differ from
// the head in exactly one top-level member, "[]" becoming "null", and that member is it. So
// tags, embedded structs and encoding/json's rules for names that collide are its own.
func plan(v any) (head []byte, splices []splice, ok bool) {
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer {
		if rv.IsNil() || marshals(rv.Type().Elem()) {
			return nil, nil, false
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() || rv.Kind() != reflect.Struct || marshals(rv.Type()) {
		return nil, nil, false
	}
	cp := reflect.New(rv.Type()).Elem()
	cp.Set(rv)
	var fields []reflect.Value // the emptied slice fields of cp (or of copies it points to)
	var elems []reflect.Value  // their values
	var walk func(s reflect.Value)
	walk = func(s reflect.Value) {
		t := s.Type()
		for i := 0; i < t.NumField(); i++ {
			f, fv := t.Field(i), s.Field(i)
			if !fv.CanSet() || f.Tag.Get("json") == "-" {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
				if fv.IsNil() {
					continue
				}
				c := reflect.New(f.Type.Elem()) // a copy: v itself is never changed
				c.Elem().Set(fv.Elem())
				fv.Set(c)
				walk(c.Elem())
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				walk(fv)
			case f.Anonymous:
			case f.Type.Kind() == reflect.Slice && fv.Len() >= minSplice && opts == "" &&
				f.Type.Elem().Kind() != reflect.Uint8 && !marshals(f.Type):
				fields = append(fields, fv)
				elems = append(elems, reflect.ValueOf(fv.Interface()))
				fv.Set(reflect.MakeSlice(f.Type, 0, 0))
			}
		}
	}
	walk(cp)
	if len(fields) == 0 {
		return nil, nil, false
	}
	head, err := json.Marshal(cp.Interface())
	if err != nil {
		return nil, nil, false
	}
	base, ok := members(head)
	if !ok {
		return nil, nil, false
	}
	for i, f := range fields {
		empty := f.Interface()
		f.Set(reflect.Zero(f.Type()))
		b, err := json.Marshal(cp.Interface())
		f.Set(reflect.ValueOf(empty))
		if err != nil {
			return nil, nil, false
		}
		variant, ok := members(b)
		if !ok || len(variant) != len(base) {
			return nil, nil, false
		}
		at := -1
		for j := range base {
			bk, bv := head[base[j].key:base[j].value], head[base[j].value:base[j].end]
			vk, vv := b[variant[j].key:variant[j].value], b[variant[j].value:variant[j].end]
			switch {
			case !bytes.Equal(bk, vk):
				return nil, nil, false
			case bytes.Equal(bv, vv):
			case at < 0 && string(bv) == "[]" && string(vv) == "null":
				at = base[j].value
			default:
				return nil, nil, false
			}
		}
		if at < 0 {
			continue // not encoded (a name a shallower field took): nothing to splice
		}
		for _, s := range splices {
			if s.at == at {
				return nil, nil, false
			}
		}
		splices = append(splices, splice{elems: elems[i], at: at})
	}
	if len(splices) == 0 {
		return nil, nil, false
	}
	sort.Slice(splices, func(i, j int) bool { return splices[i].at < splices[j].at })
	return head, splices, true
}

// member is where a top-level member of a compact JSON object is: its key's opening quote,
// its value's first byte and the end of the value.
type member struct{ key, value, end int }

// members lists the top-level members of the compact JSON object b (false if b is not one).
func members(b []byte) ([]member, bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	var out []member
	depth := 0
	cur := member{key: -1}
	for i := 1; i < len(b)-1; i++ {
		switch c := b[i]; c {
		case '"':
			if depth == 0 && cur.key < 0 {
				cur.key = i
			}
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			i = j
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ':':
			if depth == 0 && cur.value == 0 {
				cur.value = i + 1
			}
		case ',':
			if depth == 0 {
				cur.end = i
				out = append(out, cur)
				cur = member{key: -1}
			}
		}
	}
	if cur.key >= 0 {
		cur.end = len(b) - 1
		out = append(out, cur)
	}
	return out, true
}

// check encodes every element of the splices, and drops what it wrote: Encode writes
// nothing when v cannot be encoded, so an element that fails must fail before the first
// write. Each element is encoded from the slice in place (through its address, which the
// slice's encoder uses too), into encoding/json's pooled buffer. A splice whose element type
// cannot fail to encode (infallible) is not encoded twice.
func check(splices []splice) error {
	enc := json.NewEncoder(io.Discard)
	for _, s := range splices {
		if infallible(s.elems.Type().Elem()) {
			continue
		}
		for i := 0; i < s.elems.Len(); i++ {
			if err := enc.Encode(s.elems.Index(i).Addr().Interface()); err != nil {
				return err
			}
		}
	}
	return nil
}

// spliced writes head with each splice's elements in its "[]", indented, through st.
func spliced(st *stream, head []byte, splices []splice) error {
	enc := json.NewEncoder(elemWriter{st})
	from := 0
	for _, s := range splices {
		st.write(head[from : s.at+1]) // up to and with the "["
		for i := 0; i < s.elems.Len(); i++ {
			if i > 0 {
				st.write([]byte{','})
			}
			if err := enc.Encode(s.elems.Index(i).Addr().Interface()); err != nil {
				return err
			}
		}
		from = s.at + 1
	}
	st.write(head[from:])
	return st.err
}

// elemWriter indents one element's compact encoding (json.Encoder's single Write, ending in
// a newline) into the stream.
type elemWriter struct{ st *stream }

func (w elemWriter) Write(b []byte) (int, error) {
	w.st.write(bytes.TrimSuffix(b, []byte{'\n'}))
	return len(b), w.st.err
}
