package domains

import (
	"bytes"
	"encoding"
	"encoding/xml"
	"reflect"
	"sort"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// patchMarks are the elements xmlPatches changed: changed ones (an attribute, their text or a
// child changed) and added ones (appended to their parent). A nil *patchMarks notes nothing.
type patchMarks struct {
	changedEls, addedEls []*xnode
}

func (m *patchMarks) changed(n *xnode) {
	if m != nil {
		m.changedEls = append(m.changedEls, n)
	}
}

func (m *patchMarks) added(n *xnode) {
	if m != nil {
		m.addedEls = append(m.addedEls, n)
	}
}

// unmarshalerType and textUnmarshalerType are functions, not package variables, so that the
// package has no initialiser (TestLightBinaryInits).
func unmarshalerType() reflect.Type     { return reflect.TypeFor[xml.Unmarshaler]() }
func textUnmarshalerType() reflect.Type { return reflect.TypeFor[encoding.TextUnmarshaler]() }

// readBackMarked reads the patched document doc back into d as xml.Unmarshal of the whole
// document would, but decoding only the elements the patches changed or added (found by m)
// and leaving the rest of d as built: encoding/xml decodes each child element of a plain
// struct (no UnmarshalXML, only element fields) into its field on its own, so decoding a
// changed element alone gives what decoding the document gives it. Unchanged parts keep the
// values they were marshalled from, which TestPatchReadBackMatchesUnmarshal holds equal to a
// whole round trip. It reports false, having changed nothing in d, when it cannot place
// every change (a change at the root, under a type with its own UnmarshalXML, in a list
// whose elements do not match the typed slice one to one, ...): the caller then decodes
// the whole document.
func readBackMarked(d *libvirtxml.Domain, doc *xnode, m *patchMarks) (bool, error) {
	type place struct {
		chain []*xnode
		added bool
	}
	var places []place
	covered := map[*xnode]bool{} // decoded whole: changes inside them need nothing more
	for _, n := range m.addedEls {
		covered[n] = true
	}
	for _, n := range m.changedEls {
		covered[n] = true
	}
	add := func(n *xnode, added bool) bool {
		chain := doc.chainTo(n)
		if len(chain) < 2 {
			return false // the root, or no longer in the document
		}
		for _, a := range chain[:len(chain)-1] {
			if covered[a] {
				return true // an ancestor is decoded whole
			}
		}
		places = append(places, place{chain, added})
		return true
	}
	for _, n := range m.addedEls {
		if !add(n, true) {
			return false, nil
		}
	}
	seen := map[*xnode]bool{}
	for _, n := range m.changedEls {
		if seen[n] {
			continue
		}
		seen[n] = true
		if isAdded(m, n) {
			continue // decoded as added
		}
		if !add(n, false) {
			return false, nil
		}
	}
	// Find every place first: d changes only once all of them can be placed. A change below
	// a type that decodes its children itself (its own UnmarshalXML: a disk, an interface)
	// is decoded with that whole element instead.
	var targets []target
	for _, pl := range places {
		tg, ok := locate(d, pl.chain, pl.added)
		if !ok {
			return false, nil
		}
		targets = append(targets, tg)
	}
	// A target inside another decoded whole needs nothing more.
	whole := map[*xnode]bool{}
	for _, tg := range targets {
		if !tg.added {
			whole[tg.chain[len(tg.chain)-1]] = true
		}
	}
	kept := targets[:0]
	for _, tg := range targets {
		inside := false
		for _, a := range tg.chain[:len(tg.chain)-1] {
			inside = inside || whole[a]
		}
		if !inside && !(tg.added && whole[tg.chain[len(tg.chain)-1]]) {
			kept = append(kept, tg)
		}
	}
	targets = kept
	seenT := map[*xnode]bool{}
	lens := map[uintptr]int{} // a list's length once the adds before are placed
	kept = targets[:0]
	for _, tg := range targets {
		node := tg.chain[len(tg.chain)-1]
		if seenT[node] {
			continue
		}
		seenT[node] = true
		fv := tg.field
		switch {
		case fv.Kind() == reflect.Pointer && tg.count == 1 && (!tg.added || fv.IsNil()):
		case fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() != reflect.Pointer && !tg.added && fv.Len() == tg.count:
		case fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() != reflect.Pointer && tg.added:
			// Appended: it must come right after the list's elements (and the adds before).
			key := fv.Addr().Pointer()
			n, ok := lens[key]
			if !ok {
				n = fv.Len()
			}
			if tg.index != n {
				return false, nil
			}
			lens[key] = n + 1
		case fv.Kind() != reflect.Pointer && fv.Kind() != reflect.Slice && fv.Kind() != reflect.Interface && tg.count == 1:
		default:
			return false, nil
		}
		kept = append(kept, tg)
	}
	targets = kept
	if len(targets) > 1 {
		// In document order, as decoding the whole document meets them: the first element
		// that does not decode is the one its error names.
		sort.SliceStable(targets, func(i, j int) bool { return before(targets[i].chain, targets[j].chain) })
	}
	// Decode each element into a fresh value, then place them all.
	vals := make([]reflect.Value, len(targets))
	var b bytes.Buffer
	for i, tg := range targets {
		t := tg.field.Type()
		if t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		v := reflect.New(t)
		b.Reset()
		tg.chain[len(tg.chain)-1].write(&b)
		if err := xml.Unmarshal(b.Bytes(), v.Interface()); err != nil {
			return false, err
		}
		vals[i] = v
	}
	for i, tg := range targets {
		fv := tg.field
		switch fv.Kind() {
		case reflect.Pointer:
			fv.Set(vals[i])
		case reflect.Slice:
			if tg.added {
				n := fv.Len()                                              // == tg.index, checked above
				fv.Set(reflect.Append(fv.Slice3(0, n, n), vals[i].Elem())) // a fresh array: the built one may be shared
			} else {
				fv.Index(tg.index).Set(vals[i].Elem())
			}
		default:
			fv.Set(vals[i].Elem())
		}
	}
	return true, nil
}

// target is where one patched element decodes to.
type target struct {
	chain []*xnode      // from the root down to the element
	field reflect.Value // the pointer, slice or value field it decodes into
	index int           // its position among its parent's children of its name
	count int           // how many children of its name its parent has
	added bool          // appended to a list (or a nil pointer), not decoded over a value
}

// locate finds the field the last element of chain decodes into, walking d's plain structs;
// below a type that is not plain the element's ancestor just under it is decoded instead.
func locate(d *libvirtxml.Domain, chain []*xnode, added bool) (target, bool) {
	cur := reflect.ValueOf(d).Elem()
	for k := 1; k < len(chain); k++ {
		parent, node := chain[k-1], chain[k]
		if !plainDecode(cur.Type()) {
			if k < 2 {
				return target{}, false // the root decodes itself: decode the whole document
			}
			return locate(d, chain[:k], false)
		}
		fv, ok := elementField(cur, node)
		if !ok {
			return target{}, false
		}
		index, count := parent.position(node)
		if k == len(chain)-1 {
			return target{chain: chain, field: fv, index: index, count: count, added: added}, true
		}
		switch {
		case fv.Kind() == reflect.Pointer && count == 1 && !fv.IsNil():
			cur = fv.Elem()
		case fv.Kind() == reflect.Slice && fv.Len() == count:
			cur = fv.Index(index)
		case fv.Kind() == reflect.Struct && count == 1:
			cur = fv
		default:
			return target{}, false
		}
	}
	return target{}, false
}

// isAdded reports whether n is one of m's added elements.
func isAdded(m *patchMarks, n *xnode) bool {
	for _, a := range m.addedEls {
		if a == n {
			return true
		}
	}
	return false
}

// chainTo returns the elements from n down to target, or nil when target is not below n.
func (n *xnode) chainTo(target *xnode) []*xnode {
	if n == target {
		return []*xnode{n}
	}
	for _, k := range n.kids {
		if c, ok := k.(*xnode); ok {
			if chain := c.chainTo(target); chain != nil {
				return append([]*xnode{n}, chain...)
			}
		}
	}
	return nil
}

// before reports whether the element at the end of chain a comes before b's in document
// order (both chains start at the root; an ancestor comes first).
func before(a, b []*xnode) bool {
	for k := 1; k < len(a) && k < len(b); k++ {
		if a[k] == b[k] {
			continue
		}
		for _, c := range a[k-1].kids {
			switch c {
			case any(a[k]):
				return true
			case any(b[k]):
				return false
			}
		}
	}
	return len(a) < len(b)
}

// position returns c's index among n's children of its name, and how many there are.
func (n *xnode) position(c *xnode) (index, count int) {
	index = -1
	for _, k := range n.kids {
		if o, ok := k.(*xnode); ok && o.name == c.name {
			if o == c {
				index = count
			}
			count++
		}
	}
	return index, count
}

// plainDecode reports whether encoding/xml decodes t's children field by field with nothing
// else in play: no UnmarshalXML or UnmarshalText, and only attribute and element fields
// (the planned writer's plan, which also rules out namespaces and embedded structs).
func plainDecode(t reflect.Type) bool {
	for _, i := range []reflect.Type{unmarshalerType(), textUnmarshalerType()} {
		if t.Implements(i) || reflect.PointerTo(t).Implements(i) {
			return false
		}
	}
	p := planOf(t)
	if !p.generic || p.marshal != marshalNone || p.text {
		return false
	}
	for _, f := range p.body {
		if f.kind != kindElem {
			return false
		}
	}
	return true
}

// elementField returns the field of the struct v that decodes the child element n: a field
// without a namespace of n's name, when no field with a namespace has that name too and n has
// no prefix or xmlns of its own.
func elementField(v reflect.Value, n *xnode) (reflect.Value, bool) {
	if strings.IndexByte(n.name, ':') >= 0 {
		return reflect.Value{}, false
	}
	for _, a := range n.attrs {
		if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
			return reflect.Value{}, false
		}
	}
	var found reflect.Value
	body := planOf(v.Type()).body
	for i := range body {
		f := &body[i]
		if f.name != n.name {
			continue
		}
		if f.space != "" || found.IsValid() {
			return reflect.Value{}, false
		}
		found = f.of(v)
	}
	return found, found.IsValid()
}
