package domains

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/xml"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// xmlenc.go writes a libvirtxml.Domain as encoding/xml does, byte for byte, without
// encoding/xml's per-value work: each Go type's fields are planned once per process (on first
// use, never at init) from the same struct tags encoding/xml reads, and the writer keeps
// encoding/xml's indentation state exactly (printer.writeIndent).
//
// What it writes itself: structs whose tags use only name, attr, chardata, innerxml and
// omitempty (with one level of embedded struct), simple values (strings, numbers, bools),
// and the libvirtxml types in xmlHooks, whose MarshalXML methods it mirrors. Anything else
// (another MarshalXML, a TextMarshaler or MarshalerAttr, a namespace, cdata, comments, a>b
// paths, ...) is handed to encoding/xml itself for that element and its subtree, so a
// libvirtxml release that adds a type or a method costs speed, never correctness.
// TestXMLEncMatchesEncodingXML holds the whole writer against encoding/xml on random values
// of the types reachable from libvirtxml.Domain, and of each hooked type alone, so a
// libvirtxml update that changes a mirrored MarshalXML fails it; TestXMLEncCorners covers
// encoding/xml's rules on small types, and the goldens the examples.

// The interface and name types the planner compares fields with: functions, not package
// variables, so that the package has no initialiser (TestLightBinaryInits).
func marshalerType() reflect.Type     { return reflect.TypeFor[xml.Marshaler]() }
func marshalerAttrType() reflect.Type { return reflect.TypeFor[xml.MarshalerAttr]() }
func textMarshalerType() reflect.Type { return reflect.TypeFor[encoding.TextMarshaler]() }

// fieldKind is how encoding/xml writes a struct field.
type fieldKind uint8

const (
	kindElem fieldKind = iota
	kindAttr
	kindCharData
	kindInnerXML
)

// fieldPlan is one struct field as encoding/xml's typeinfo sees it.
type fieldPlan struct {
	index     int
	name      string
	kind      fieldKind
	omitEmpty bool
	// space is an element field's namespace: encoding/xml writes such a field (fallback).
	space string
	// embed is 1 + the index of the embedded struct the field belongs to (0: none).
	embed int
	// plan caches the plan of the type last met in this field (a sync.Map lookup per
	// element was a tenth of a render).
	plan *atomic.Pointer[planCache]
}

// planCache is a field's last type and its plan.
type planCache struct {
	t reflect.Type
	p *typePlan
}

// cachedPlan is planOf(t) through a field's cache (c may be nil).
func cachedPlan(c *atomic.Pointer[planCache], t reflect.Type) *typePlan {
	if c != nil {
		if pc := c.Load(); pc != nil && pc.t == t {
			return pc.p
		}
	}
	p := planOf(t)
	if c != nil {
		c.Store(&planCache{t: t, p: p})
	}
	return p
}

// marshalKind says whether T or *T has a MarshalXML method.
type marshalKind uint8

const (
	marshalNone marshalKind = iota
	marshalValue
	marshalPointer
)

// typePlan is what the writer knows about one Go type.
type typePlan struct {
	// generic: a struct the writer can write field by field (else encoding/xml writes it).
	generic bool
	// xmlName is the name its XMLName field's tag gives ("" for none).
	xmlName string
	// attrs and body are its fields: attributes, then elements and text, in field order.
	attrs, body []fieldPlan
	marshal     marshalKind
	// text: T or *T is a TextMarshaler (encoding/xml writes it).
	text bool
	// hook mirrors the type's MarshalXML; nil for none (encoding/xml runs the method).
	hook xmlHook
	// embeds: some fields belong to an embedded struct.
	embeds bool
}

// of returns the field f of the struct v.
func (f *fieldPlan) of(v reflect.Value) reflect.Value {
	if f.embed > 0 {
		v = v.Field(f.embed - 1)
	}
	return v.Field(f.index)
}

// xmlHook writes v (an addressable value of a type with MarshalXML) as its MarshalXML would,
// given the start element encoding/xml's defaultStart builds: its name, and the attributes
// (name, value pairs) of the start template an enclosing MarshalXML passed, if any. It
// returns errNoHook, having written nothing, to leave the value to encoding/xml.
type xmlHook func(e *xmlEnc, v reflect.Value, name string, pairs []string) error

// errNoHook: a hook declines a value (a part of it the writer cannot write itself).
var errNoHook = errors.New("no hook")

var typePlans sync.Map // reflect.Type -> *typePlan

// planOf returns t's plan, computing it on first use.
func planOf(t reflect.Type) *typePlan {
	if p, ok := typePlans.Load(t); ok {
		return p.(*typePlan)
	}
	p := makePlan(t)
	typePlans.Store(t, p)
	return p
}

func makePlan(t reflect.Type) *typePlan {
	p := &typePlan{}
	switch {
	case t.Implements(marshalerType()):
		p.marshal = marshalValue
	case reflect.PointerTo(t).Implements(marshalerType()):
		p.marshal = marshalPointer
	}
	p.text = t.Implements(textMarshalerType()) || reflect.PointerTo(t).Implements(textMarshalerType())
	if p.marshal != marshalNone {
		p.hook = xmlHooks()[t]
	}
	if t.Kind() != reflect.Struct {
		return p
	}
	p.generic = true
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("xml") != "-" {
			// encoding/xml writes an embedded struct's fields in its place. The writer
			// follows one level of an exported struct (not a pointer) that has no XMLName;
			// a name two fields share is refused below.
			inner := planOf(f.Type)
			if !f.IsExported() || f.Type.Kind() != reflect.Struct || !inner.generic || inner.xmlName != "" || inner.embeds {
				p.generic = false
				continue
			}
			p.embeds = true
			for _, fp := range inner.attrs {
				fp.embed, fp.plan = i+1, new(atomic.Pointer[planCache])
				p.attrs = append(p.attrs, fp)
			}
			for _, fp := range inner.body {
				fp.embed, fp.plan = i+1, new(atomic.Pointer[planCache])
				p.body = append(p.body, fp)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("xml")
		if tag == "-" {
			continue
		}
		name, flags, _ := strings.Cut(tag, ",")
		space := ""
		if ns, local, ok := strings.Cut(name, " "); ok {
			space, name = ns, local
		}
		if strings.IndexByte(name, '>') >= 0 {
			p.generic = false // a parent path
			continue
		}
		fp := fieldPlan{index: i, name: name, space: space, plan: new(atomic.Pointer[planCache])}
		if flags != "" {
			for fl := range strings.SplitSeq(flags, ",") {
				switch fl {
				case "attr":
					fp.kind = kindAttr
				case "chardata":
					fp.kind = kindCharData
				case "innerxml":
					fp.kind = kindInnerXML
				case "omitempty":
					fp.omitEmpty = true
				default:
					p.generic = false // cdata, comment, any, or a tag encoding/xml refuses
				}
			}
		}
		if f.Name == "XMLName" {
			if name == "" || flags != "" || space != "" {
				p.generic = false // the name comes from the value
			}
			p.xmlName = name
			continue
		}
		if space != "" && fp.kind != kindElem || !fieldWritable(f.Type, fp) {
			p.generic = false
			continue
		}
		switch fp.kind {
		case kindAttr:
			if fp.name == "" {
				fp.name = f.Name
			}
			p.attrs = append(p.attrs, fp)
		case kindElem:
			if fp.name == "" {
				fp.space, fp.name = lookupXMLName(f.Type)
				if fp.name == "" {
					fp.name = f.Name
				}
			}
			p.body = append(p.body, fp)
		default:
			if fp.name != "" || fp.omitEmpty {
				p.generic = false // encoding/xml's own rules for odd tags
				continue
			}
			p.body = append(p.body, fp)
		}
	}
	if p.generic && (duplicateNames(p.attrs) || duplicateNames(p.body)) {
		p.generic = false // encoding/xml's conflict rules
	}
	return p
}

// duplicateNames reports whether two of fields have the same name (and namespace).
func duplicateNames(fields []fieldPlan) bool {
	for i := range fields {
		for j := i + 1; j < len(fields); j++ {
			if fields[i].name == fields[j].name && fields[i].space == fields[j].space && fields[i].kind == fields[j].kind {
				return true
			}
		}
	}
	return false
}

// lookupXMLName is encoding/xml's: the name (and namespace) an element field with no name in
// its tag takes from its type's XMLName field ("" when its tag names none).
func lookupXMLName(t reflect.Type) (space, name string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return "", ""
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Name != "XMLName" {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("xml"), ",")
		if ns, local, ok := strings.Cut(name, " "); ok {
			return ns, local
		}
		return "", name
	}
	return "", ""
}

// fieldWritable reports whether the writer handles a field of type t the way fp asks without
// encoding/xml: elements always (their values are planned when met), attributes and text only
// of plain kinds.
func fieldWritable(t reflect.Type, fp fieldPlan) bool {
	if fp.kind == kindElem {
		return true
	}
	for n := 0; t.Kind() == reflect.Pointer; n++ {
		if implementsAny(t) || (n > 0 && fp.kind == kindAttr) {
			return false // encoding/xml takes one pointer off an attribute, then refuses it
		}
		t = t.Elem()
	}
	if implementsAny(t) {
		return false
	}
	switch fp.kind {
	case kindInnerXML:
		return t == reflect.TypeFor[string]() // encoding/xml writes a named string type as an element
	case kindAttr:
		if t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 {
			return false
		}
	}
	return simpleKind(t.Kind())
}

func implementsAny(t reflect.Type) bool {
	for _, i := range []reflect.Type{marshalerType(), marshalerAttrType(), textMarshalerType()} {
		if t.Implements(i) || reflect.PointerTo(t).Implements(i) {
			return true
		}
	}
	return t == reflect.TypeFor[xml.Attr]()
}

func simpleKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String, reflect.Bool:
		return true
	}
	return false
}

// xmlEnc is the writer: the text so far and encoding/xml's indentation state.
type xmlEnc struct {
	b          []byte
	indent     bool // two spaces per level, as xml.MarshalIndent(v, "", "  ")
	depth      int
	indentedIn bool
	putNewline bool
	sub        bytes.Buffer  // encoding/xml's output for a fallback element
	subw       *bufio.Writer // over sub: xml.NewEncoder reuses it instead of allocating 4 KiB
}

var xmlEncs = sync.Pool{New: func() any { return &xmlEnc{b: make([]byte, 0, 16<<10)} }}

// encodeXML writes v as xml.Marshal (indent false) or xml.MarshalIndent(v, "", "  ") does.
func encodeXML(v any, indent bool) (string, error) {
	e := xmlEncs.Get().(*xmlEnc)
	e.b, e.indent, e.depth, e.indentedIn, e.putNewline = e.b[:0], indent, 0, false, false
	err := e.value(reflect.ValueOf(v), "", false)
	s := string(e.b)
	if cap(e.b) <= 1<<20 {
		xmlEncs.Put(e)
	}
	if err != nil {
		return "", err
	}
	return s, nil
}

// writeIndent is encoding/xml's printer.writeIndent with prefix "" and indent "  ".
func (e *xmlEnc) writeIndent(delta int) {
	if !e.indent {
		return
	}
	if delta < 0 {
		e.depth--
		if e.indentedIn {
			e.indentedIn = false
			return
		}
	}
	if e.putNewline {
		e.b = append(e.b, '\n')
	} else {
		e.putNewline = true
	}
	for i := 0; i < e.depth; i++ {
		e.b = append(e.b, ' ', ' ')
	}
	if delta > 0 {
		e.depth++
		e.indentedIn = true
	}
}

// open writes "<name" (attributes follow, then closeStart).
func (e *xmlEnc) open(name string) {
	e.writeIndent(1)
	e.b = append(e.b, '<')
	e.b = append(e.b, name...)
}

func (e *xmlEnc) closeStart() { e.b = append(e.b, '>') }

// attr writes one attribute.
func (e *xmlEnc) attr(name, value string) {
	e.b = append(e.b, ' ')
	e.b = append(e.b, name...)
	e.b = append(e.b, '=', '"')
	e.escape(value)
	e.b = append(e.b, '"')
}

// end writes "</name>".
func (e *xmlEnc) end(name string) {
	e.writeIndent(-1)
	e.b = append(e.b, '<', '/')
	e.b = append(e.b, name...)
	e.b = append(e.b, '>')
}

// value is encoding/xml's printer.marshalValue with no start template; name is the field's
// name ("" at the top).
func (e *xmlEnc) value(v reflect.Value, name string, omitEmpty bool) error {
	return e.valueAs(v, name, omitEmpty, v.CanAddr(), nil, false, nil)
}

// valueAs is encoding/xml's printer.marshalValue: name and omitEmpty are the field's, or with
// tmpl set the start template's name (tmplAttrs its attributes, name=value pairs). addr says
// whether encoding/xml sees v addressable: a MarshalXML that passes a struct by value to
// EncodeElement makes its fields unaddressable, and then a pointer receiver's MarshalXML is
// not called on them.
//
// cache is the field's plan cache, or nil.
func (e *xmlEnc) valueAs(v reflect.Value, name string, omitEmpty, addr bool, tmplAttrs []string, tmpl bool, cache *atomic.Pointer[planCache]) error {
	if !v.IsValid() {
		return nil
	}
	if omitEmpty && isEmptyValue(v) {
		return nil
	}
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
		addr = true
	}
	t := v.Type()
	p := cachedPlan(cache, t)
	if (p.marshal == marshalValue && v.CanInterface()) || (p.marshal == marshalPointer && addr) {
		if name == "" {
			name = t.Name()
		}
		if p.hook != nil && v.CanAddr() {
			if err := p.hook(e, v, name, tmplAttrs); err != errNoHook {
				return err
			}
		}
		return e.fallback(v, startOf(name, tmplAttrs), true, addr)
	}
	if p.text {
		return e.fallback(v, startOf(name, tmplAttrs), false, addr)
	}
	k := v.Kind()
	if (k == reflect.Slice || k == reflect.Array) && t.Elem().Kind() != reflect.Uint8 {
		for i, n := 0, v.Len(); i < n; i++ {
			if err := e.valueAs(v.Index(i), name, omitEmpty, addr || k == reflect.Slice, tmplAttrs, tmpl, cache); err != nil {
				return err
			}
		}
		return nil
	}
	if k == reflect.Struct {
		if !p.generic {
			if !tmpl && nameFromXMLName(v) {
				name = ""
			}
			return e.fallback(v, startOf(name, tmplAttrs), false, addr)
		}
		if !tmpl && p.xmlName != "" {
			name = p.xmlName
		} else if name == "" {
			name = t.Name()
		}
		if name == "" || strings.IndexByte(name, '[') >= 0 {
			return e.fallback(v, startOf(name, tmplAttrs), false, addr)
		}
		e.open(name)
		e.pairs(tmplAttrs)
		e.attrs(p.attrs, v)
		e.closeStart()
		if err := e.body(p.body, v, addr); err != nil {
			return err
		}
		e.end(name)
		return nil
	}
	if !simpleKind(k) {
		return e.fallback(v, startOf(name, tmplAttrs), false, addr) // encoding/xml's error
	}
	if name == "" {
		name = t.Name()
	}
	if name == "" {
		return e.fallback(v, startOf(name, tmplAttrs), false, addr)
	}
	e.open(name)
	e.pairs(tmplAttrs)
	e.closeStart()
	e.simple(v)
	e.end(name)
	return nil
}

// element writes one element named name: the attributes in pairs first, then the attribute
// fields of every part in turn, then their elements and text in turn. One part is a struct
// written as encoding/xml writes it; several are a struct that embeds them in that order,
// as libvirtxml's MarshalXML methods build them. Every part's type must be generic.
func (e *xmlEnc) element(name string, pairs []string, addr bool, parts ...reflect.Value) error {
	e.open(name)
	e.pairs(pairs)
	for _, v := range parts {
		e.attrs(planOf(v.Type()).attrs, v)
	}
	e.closeStart()
	for _, v := range parts {
		if err := e.body(planOf(v.Type()).body, v, addr); err != nil {
			return err
		}
	}
	e.end(name)
	return nil
}

// pairs writes attributes given as name, value, name, value...
func (e *xmlEnc) pairs(kv []string) {
	for i := 0; i+1 < len(kv); i += 2 {
		e.attr(kv[i], kv[i+1])
	}
}

// attrs writes p's attribute fields of the struct v.
func (e *xmlEnc) attrs(fields []fieldPlan, v reflect.Value) {
	for i := range fields {
		f := &fields[i]
		fv := f.of(v)
		if f.omitEmpty && isEmptyValue(fv) {
			continue
		}
		for fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				break
			}
			fv = fv.Elem()
		}
		if fv.Kind() == reflect.Pointer {
			continue
		}
		e.b = append(e.b, ' ')
		e.b = append(e.b, f.name...)
		e.b = append(e.b, '=', '"')
		e.simple(fv)
		e.b = append(e.b, '"')
	}
}

// body writes p's element and text fields of the struct v (addr: as valueAs).
func (e *xmlEnc) body(fields []fieldPlan, v reflect.Value, addr bool) error {
	for i := range fields {
		f := &fields[i]
		fv := f.of(v)
		switch f.kind {
		case kindCharData:
			for fv.Kind() == reflect.Pointer && !fv.IsNil() {
				fv = fv.Elem()
			}
			if fv.Kind() != reflect.Pointer {
				e.simple(fv)
			}
		case kindInnerXML:
			for fv.Kind() == reflect.Pointer && !fv.IsNil() {
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.String {
				e.b = append(e.b, fv.String()...)
			}
		default:
			if f.space != "" {
				if err := e.namespaced(fv, f, addr); err != nil {
					return err
				}
				continue
			}
			if err := e.valueAs(fv, f.name, f.omitEmpty, addr, nil, false, f.plan); err != nil {
				return err
			}
		}
	}
	return nil
}

// simple writes a plain value as encoding/xml's marshalSimple formats it, escaped.
func (e *xmlEnc) simple(v reflect.Value) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.b = strconv.AppendInt(e.b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.b = strconv.AppendUint(e.b, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		e.b = strconv.AppendFloat(e.b, v.Float(), 'g', -1, v.Type().Bits())
	case reflect.Bool:
		e.b = strconv.AppendBool(e.b, v.Bool())
	case reflect.String:
		e.escape(v.String())
	}
}

// escape is encoding/xml's EscapeString (attributes, text and chardata escape alike there,
// newlines included).
func (e *xmlEnc) escape(s string) {
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, width := utf8.DecodeRuneInString(s[i:])
			i += width
			if !inCharacterRange(r) || (r == utf8.RuneError && width == 1) {
				e.b = append(e.b, s[last:i-width]...)
				e.b = append(e.b, "\uFFFD"...)
				last = i
			}
			continue
		}
		i++
		var esc string
		switch c {
		case '"':
			esc = "&#34;"
		case '\'':
			esc = "&#39;"
		case '&':
			esc = "&amp;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '\t':
			esc = "&#x9;"
		case '\n':
			esc = "&#xA;"
		case '\r':
			esc = "&#xD;"
		default:
			if c >= 0x20 {
				continue
			}
			esc = "\uFFFD"
		}
		e.b = append(e.b, s[last:i-1]...)
		e.b = append(e.b, esc...)
		last = i
	}
	e.b = append(e.b, s[last:]...)
}

// fallback has encoding/xml write v: through its MarshalXML with start when marshaler is
// set, else as encoding/xml's marshalValue would (start then carries only a field's name, or
// nothing). The sub-encoder's prefix is this writer's indentation, so its output sits in the
// document exactly where encoding/xml's own would.
func (e *xmlEnc) fallback(v reflect.Value, start xml.StartElement, marshaler, addr bool) error {
	e.sub.Reset()
	if e.subw == nil {
		e.subw = bufio.NewWriterSize(&e.sub, 4096)
	}
	e.subw.Reset(&e.sub)
	enc := xml.NewEncoder(e.subw)
	if e.indent {
		enc.Indent(strings.Repeat("  ", e.depth), "  ")
	}
	var err error
	if marshaler {
		var m xml.Marshaler
		if v.CanAddr() && addr {
			m, _ = v.Addr().Interface().(xml.Marshaler)
		}
		if m == nil {
			m = v.Interface().(xml.Marshaler)
		}
		err = m.MarshalXML(enc, start)
	} else {
		iv := v.Interface()
		if v.CanAddr() && addr {
			iv = v.Addr().Interface() // encoding/xml sees an addressable value, as in the parent
		}
		if start.Name.Local != "" {
			err = enc.EncodeElement(iv, start)
		} else {
			err = enc.Encode(iv)
		}
	}
	if err == nil {
		err = enc.Close()
	}
	if err != nil {
		return err
	}
	if e.sub.Len() == 0 {
		return nil
	}
	if e.indent {
		if e.putNewline {
			e.b = append(e.b, '\n')
		}
		e.putNewline = true
		e.indentedIn = false
	}
	e.b = append(e.b, e.sub.Bytes()...)
	return nil
}

// namespaced has encoding/xml write an element field with a namespace: given the field's
// name as the start element, EncodeElement names it as marshalValue would (the name came
// from the type's XMLName or the field's tag, and both say the same).
func (e *xmlEnc) namespaced(v reflect.Value, f *fieldPlan, addr bool) error {
	if f.omitEmpty && isEmptyValue(v) {
		return nil
	}
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
		addr = true
	}
	return e.fallback(v, xml.StartElement{Name: xml.Name{Space: f.space, Local: f.name}}, false, addr)
}

// startOf is the start element a fallback passes on: the field's or template's name (none:
// Encode, at the top) and the template's attributes.
func startOf(name string, pairs []string) xml.StartElement {
	st := xml.StartElement{Name: xml.Name{Local: name}}
	for i := 0; i+1 < len(pairs); i += 2 {
		st.Attr = append(st.Attr, xml.Attr{Name: xml.Name{Local: pairs[i]}, Value: pairs[i+1]})
	}
	return st
}

// nameFromXMLName reports whether encoding/xml names the struct v from its XMLName field (its
// tag, or its value when the tag names none), before the field's name: a fallback must then
// not pass the field's name, which EncodeElement would put first.
func nameFromXMLName(v reflect.Value) bool {
	f, ok := v.Type().FieldByName("XMLName")
	if !ok {
		return false
	}
	if name, _, _ := strings.Cut(f.Tag.Get("xml"), ","); name != "" {
		return true
	}
	fv, err := v.FieldByIndexErr(f.Index)
	if err != nil || !fv.CanInterface() {
		return false
	}
	n, ok := fv.Interface().(xml.Name)
	return ok && n.Local != ""
}

// isEmptyValue is encoding/xml's.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64,
		reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
