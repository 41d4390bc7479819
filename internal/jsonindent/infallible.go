package jsonindent

import (
	"encoding"
	"reflect"
)

// Infallible is implemented by a type whose MarshalJSON or MarshalText never returns an
// error (host.Address). Encode encodes a long slice's elements once beforehand only to find
// an error before its first write (check); when nothing in the elements' type can fail, it
// skips that pass, which was a third of `inspect -o json` on the 64-GPU host's devices.
type Infallible interface {
	// MarshalNeverFails is a marker: its type's MarshalJSON or MarshalText returns no error
	// for any value.
	MarshalNeverFails()
}

// infallible reports whether encoding/json cannot fail to encode any value of type t: no
// float (NaN and infinities are errors), no interface, channel, function or complex number,
// no map whose keys it cannot encode, no type that is its own encoder unless it is
// Infallible, and no type that contains itself (a cyclic value is an error). Anything it
// cannot tell is fallible.
func infallible(t reflect.Type) bool {
	return infallibleIn(t, map[reflect.Type]bool{})
}

// infallibleIn is infallible with the types being walked in open, to tell a type that
// contains itself.
func infallibleIn(t reflect.Type, open map[reflect.Type]bool) bool {
	if open[t] {
		return false
	}
	infallibleType := reflect.TypeFor[Infallible]()
	if t.Implements(infallibleType) || reflect.PointerTo(t).Implements(infallibleType) {
		return true
	}
	if marshals(t) {
		return false
	}
	open[t] = true
	defer delete(open, t)
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return infallibleIn(t.Elem(), open)
	case reflect.Map:
		switch t.Key().Kind() {
		case reflect.String,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		default:
			return false
		}
		k := t.Key()
		textMarshaler := reflect.TypeFor[encoding.TextMarshaler]()
		if k.Implements(textMarshaler) || reflect.PointerTo(k).Implements(textMarshaler) {
			return false // encoding/json calls the key's method, which may fail
		}
		return infallibleIn(t.Elem(), open)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous || f.Tag.Get("json") == "-" {
				continue // encoding/json never encodes it
			}
			if !infallibleIn(f.Type, open) {
				return false
			}
		}
		return true
	}
	return false
}
