package domains

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// XMLPatch is one spec.xmlPatches entry: the escape hatch for a libvirt setting the spec has
// no key for. Exactly one of Set, Remove and Add names a path (docs/spec.md, "xmlPatches"):
//
//	set: /domain/devices/disk[1]/driver/@cache     value: none
//	set: /domain/on_crash                           value: restart
//	remove: /domain/features/hyperv/vpindex
//	add: /domain/devices                            xml: <watchdog model="i6300esb" action="reset"/>
//
// A path is absolute and starts at /domain. Each step is an element name, optionally with a
// 1-based index (disk[2]) or an attribute test (interface[@type='bridge']); a step without one
// must match exactly one element. The last step of a set or remove may be @attribute. set
// creates missing elements along its path (steps without predicates only); add appends the
// XML fragment as the last child of the element the path names.
type XMLPatch struct {
	Set    string `yaml:"set,omitempty" json:"set,omitempty"`
	Value  string `yaml:"value,omitempty" json:"value,omitempty"`
	Remove string `yaml:"remove,omitempty" json:"remove,omitempty"`
	Add    string `yaml:"add,omitempty" json:"add,omitempty"`
	XML    string `yaml:"xml,omitempty" json:"xml,omitempty"`
}

// xnode is an element of a small DOM: enough to patch a domain document and write it back.
// Prefixed names (qemu:commandline) keep their prefix as written.
type xnode struct {
	name  string
	attrs []xml.Attr // Name.Space holds the prefix, as the raw tokenizer gives it
	kids  []any      // *xnode, xml.CharData, xml.Comment
}

// parseXML reads one element (and its subtree) from s.
func parseXML(s string) (*xnode, error) {
	d := xml.NewDecoder(strings.NewReader(s))
	var stack []*xnode
	var root *xnode
	for {
		tok, err := d.RawToken()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := &xnode{name: qname(t.Name), attrs: append([]xml.Attr(nil), t.Attr...)}
			if len(stack) == 0 {
				if root != nil {
					return nil, fmt.Errorf("more than one top-level element (<%s> after <%s>)", n.name, root.name)
				}
				root = n
			} else {
				p := stack[len(stack)-1]
				p.kids = append(p.kids, n)
			}
			stack = append(stack, n)
		case xml.EndElement:
			if len(stack) == 0 || stack[len(stack)-1].name != qname(t.Name) {
				return nil, fmt.Errorf("unexpected </%s>", qname(t.Name))
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.kids = append(p.kids, xml.CharData(append([]byte(nil), t...)))
			} else if len(bytes.TrimSpace(t)) > 0 {
				return nil, fmt.Errorf("text outside an element: %q", strings.TrimSpace(string(t)))
			}
		case xml.Comment:
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.kids = append(p.kids, xml.Comment(append([]byte(nil), t...)))
			}
		case xml.Directive:
			return nil, errors.New("directives (<!DOCTYPE …>, <!ENTITY …>) are not allowed")
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("<%s> is not closed", stack[len(stack)-1].name)
	}
	if root == nil {
		return nil, errors.New("no element")
	}
	return root, nil
}

func qname(n xml.Name) string {
	if n.Space != "" {
		return n.Space + ":" + n.Local
	}
	return n.Local
}

// clone returns a deep copy of n (patches change a tree in place; copying one costs a
// fraction of parsing its text again).
func (n *xnode) clone() *xnode {
	c := &xnode{name: n.name, attrs: append([]xml.Attr(nil), n.attrs...), kids: make([]any, len(n.kids))}
	for i, k := range n.kids {
		switch k := k.(type) {
		case *xnode:
			c.kids[i] = k.clone()
		case xml.CharData:
			c.kids[i] = k.Copy()
		case xml.Comment:
			c.kids[i] = k.Copy()
		default:
			c.kids[i] = k
		}
	}
	return c
}

// write writes n as XML.
func (n *xnode) write(b *bytes.Buffer) {
	b.WriteByte('<')
	b.WriteString(n.name)
	for _, a := range n.attrs {
		b.WriteByte(' ')
		if a.Name.Space != "" {
			b.WriteString(a.Name.Space)
			b.WriteByte(':')
		}
		b.WriteString(a.Name.Local)
		b.WriteString(`="`)
		_ = xml.EscapeText(b, []byte(a.Value))
		b.WriteString(`"`)
	}
	b.WriteString(">") // <x></x>, never <x/>: as encoding/xml writes, so raw XML kept by libvirtxml stays byte for byte
	for _, k := range n.kids {
		switch k := k.(type) {
		case *xnode:
			k.write(b)
		case xml.CharData:
			_ = xml.EscapeText(b, k)
		case xml.Comment:
			b.WriteString("<!--" + string(k) + "-->")
		}
	}
	b.WriteString("</")
	b.WriteString(n.name)
	b.WriteByte('>')
}

// pathStep is one step of a patch path.
type pathStep struct {
	name      string
	index     int    // 1-based; 0 = none
	attr, val string // [@attr='val']; attr "" = none
}

func (s pathStep) String() string {
	switch {
	case s.index > 0:
		return fmt.Sprintf("%s[%d]", s.name, s.index)
	case s.attr != "":
		return fmt.Sprintf("%s[@%s='%s']", s.name, s.attr, s.val)
	}
	return s.name
}

// parsePath splits an absolute path into element steps and an optional final @attribute.
func parsePath(p string) (steps []pathStep, attr string, err error) {
	if !strings.HasPrefix(p, "/domain") {
		return nil, "", fmt.Errorf("path %q: must start at /domain", p)
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, part := range parts {
		if strings.HasPrefix(part, "@") {
			if i != len(parts)-1 || i == 0 {
				return nil, "", fmt.Errorf("path %q: an @attribute can only be the last step", p)
			}
			attr = part[1:]
			if !validName(attr) {
				return nil, "", fmt.Errorf("path %q: %q is not an attribute name", p, part)
			}
			continue
		}
		s := pathStep{name: part}
		if j := strings.IndexByte(part, '['); j >= 0 {
			if !strings.HasSuffix(part, "]") {
				return nil, "", fmt.Errorf("path %q: step %q: unclosed [", p, part)
			}
			s.name = part[:j]
			pred := part[j+1 : len(part)-1]
			if n, err := strconv.Atoi(pred); err == nil {
				if n < 1 {
					return nil, "", fmt.Errorf("path %q: step %q: indexes start at 1", p, part)
				}
				s.index = n
			} else {
				k, v, ok := strings.Cut(pred, "=")
				if !ok || !strings.HasPrefix(k, "@") || len(v) < 2 || (v[0] != '\'' && v[0] != '"') || v[len(v)-1] != v[0] {
					return nil, "", fmt.Errorf("path %q: step %q: want [N] or [@attr='value']", p, part)
				}
				s.attr, s.val = k[1:], v[1:len(v)-1]
			}
		}
		if !validName(s.name) {
			return nil, "", fmt.Errorf("path %q: %q is not an element name", p, s.name)
		}
		steps = append(steps, s)
	}
	if steps[0].name != "domain" || steps[0].index > 1 || steps[0].attr != "" {
		return nil, "", fmt.Errorf("path %q: must start at /domain", p)
	}
	return steps, attr, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		ok := r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' ||
			i > 0 && (r == '-' || r == '.' || r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}

func (n *xnode) attr(name string) (string, bool) {
	for _, a := range n.attrs {
		if qname(a.Name) == name {
			return a.Value, true
		}
	}
	return "", false
}

// setAttr sets an attribute and reports whether that changed anything.
func (n *xnode) setAttr(name, val string) bool {
	for i, a := range n.attrs {
		if qname(a.Name) == name {
			n.attrs[i].Value = val
			return a.Value != val
		}
	}
	space, local, ok := strings.Cut(name, ":")
	if !ok {
		space, local = "", name
	}
	n.attrs = append(n.attrs, xml.Attr{Name: xml.Name{Space: space, Local: local}, Value: val})
	return true
}

// child finds the one element child s names. create adds it when absent (set's paths).
func (n *xnode) child(s pathStep, where string, create bool) (*xnode, error) {
	var match []*xnode
	for _, k := range n.kids {
		if c, ok := k.(*xnode); ok && c.name == s.name {
			if s.attr != "" {
				if v, ok := c.attr(s.attr); !ok || v != s.val {
					continue
				}
			}
			match = append(match, c)
		}
	}
	switch {
	case s.index > 0 && s.index <= len(match):
		return match[s.index-1], nil
	case s.index > 0:
		return nil, fmt.Errorf("%s has %d <%s> elements, not %d", where, len(match), s.name, s.index)
	case len(match) == 1:
		return match[0], nil
	case len(match) > 1:
		return nil, fmt.Errorf("%s has %d <%s> elements: say which with [N] or [@attr='value']", where, len(match), s.name)
	case create && s.attr == "":
		c := &xnode{name: s.name}
		n.kids = append(n.kids, c)
		return c, nil
	}
	return nil, fmt.Errorf("%s has no <%s>", where, s)
}

// walk follows steps below the root element.
func (n *xnode) walk(steps []pathStep, create bool) (*xnode, error) {
	el, _, err := n.walkWhere(steps, create)
	return el, err
}

// walkWhere is walk that also returns the path it followed, for messages.
func (n *xnode) walkWhere(steps []pathStep, create bool) (*xnode, string, error) {
	cur, where := n, "/domain"
	for _, s := range steps[1:] {
		c, err := cur.child(s, where, create)
		if err != nil {
			return nil, "", err
		}
		cur, where = c, where+"/"+s.String()
	}
	return cur, where, nil
}

// remove deletes the element at steps (its parent's child).
func (n *xnode) remove(steps []pathStep) error {
	parent, where, err := n.walkWhere(steps[:len(steps)-1], false)
	if err != nil {
		return err
	}
	target, err := parent.child(steps[len(steps)-1], where, false)
	if err != nil {
		return err
	}
	for i, k := range parent.kids {
		if k == any(target) {
			parent.kids = append(parent.kids[:i], parent.kids[i+1:]...)
			return nil
		}
	}
	return nil
}

// owned are the parts of the domain vgpu-host keeps its own books by; patches leave them alone.
var owned = lazy.Value[map[string]string]{New: func() map[string]string {
	return map[string]string{
		"name":     "metadata.name",
		"uuid":     "derived from metadata.name",
		"metadata": "its allocation record",
	}
}}

// check parses the patch without a document: the spec validator reports its mistakes.
func (p XMLPatch) check() error {
	ops := 0
	for _, s := range []string{p.Set, p.Remove, p.Add} {
		if s != "" {
			ops++
		}
	}
	if ops != 1 {
		return errors.New("give exactly one of set, remove, add")
	}
	path := p.Set + p.Remove + p.Add
	if steps, _, err := parsePath(path); err == nil && len(steps) > 1 && owned.Get()[steps[1].name] != "" {
		return fmt.Errorf("%s is vgpu-host's (%s): change it there, not by patch", path, owned.Get()[steps[1].name])
	}
	switch {
	case p.Set != "":
		if p.XML != "" {
			return errors.New("set takes value, not xml")
		}
		if _, _, err := parsePath(p.Set); err != nil {
			return err
		}
	case p.Remove != "":
		if p.Value != "" || p.XML != "" {
			return errors.New("remove takes no value or xml")
		}
		steps, attr, err := parsePath(p.Remove)
		if err != nil {
			return err
		}
		if len(steps) == 1 && attr == "" {
			return errors.New("cannot remove /domain itself")
		}
	case p.Add != "":
		if p.Value != "" {
			return errors.New("add takes xml, not value")
		}
		if _, attr, err := parsePath(p.Add); err != nil {
			return err
		} else if attr != "" {
			return errors.New("add names an element to append to, not an @attribute (use set)")
		}
		if _, err := parseXML(p.XML); err != nil {
			return fmt.Errorf("xml: %w", err)
		}
	}
	return nil
}

// apply applies the patch to the document rooted at doc.
func (p XMLPatch) apply(doc *xnode) error { return p.applyMarked(doc, nil) }

// applyMarked is apply, noting in m (when not nil) which elements the patch changed.
func (p XMLPatch) applyMarked(doc *xnode, m *patchMarks) error {
	switch {
	case p.Set != "":
		steps, attr, _ := parsePath(p.Set)
		el, err := doc.walkCreate(steps, m)
		if err != nil {
			return err
		}
		if attr != "" {
			if el.setAttr(attr, p.Value) {
				m.changed(el)
			}
			return nil
		}
		for _, k := range el.kids {
			if _, ok := k.(*xnode); ok {
				return fmt.Errorf("<%s> has child elements: set an @attribute or a child, not its text", el.name)
			}
		}
		if len(el.kids) != 1 || !isText(el.kids[0], p.Value) {
			m.changed(el)
		}
		el.kids = []any{xml.CharData(p.Value)}
	case p.Remove != "":
		steps, attr, _ := parsePath(p.Remove)
		if attr == "" {
			parent, err := doc.walk(steps[:len(steps)-1], false)
			if err != nil {
				return err
			}
			m.changed(parent)
			return doc.remove(steps)
		}
		el, err := doc.walk(steps, false)
		if err != nil {
			return err
		}
		for i, a := range el.attrs {
			if qname(a.Name) == attr {
				el.attrs = append(el.attrs[:i], el.attrs[i+1:]...)
				m.changed(el)
				return nil
			}
		}
		return fmt.Errorf("<%s> has no attribute %s", el.name, attr)
	case p.Add != "":
		steps, _, _ := parsePath(p.Add)
		el, err := doc.walk(steps, false)
		if err != nil {
			return err
		}
		frag, _ := parseXML(p.XML)
		el.kids = append(el.kids, frag)
		m.added(frag)
	}
	return nil
}

// isText reports whether k is the text s.
func isText(k any, s string) bool {
	t, ok := k.(xml.CharData)
	return ok && string(t) == s
}

// walkCreate is walk(steps, true) that notes the first element it creates, if any, as added.
func (n *xnode) walkCreate(steps []pathStep, m *patchMarks) (*xnode, error) {
	cur, where := n, "/domain"
	first := true
	for _, s := range steps[1:] {
		c, err := cur.child(s, where, false)
		if err != nil {
			if c, err = cur.child(s, where, true); err != nil {
				return nil, err
			}
			if first {
				m.added(c)
				first = false
			}
		}
		cur, where = c, where+"/"+s.String()
	}
	return cur, nil
}

// what names the patch in errors.
func (p XMLPatch) what() string {
	switch {
	case p.Set != "":
		return "set " + p.Set
	case p.Remove != "":
		return "remove " + p.Remove
	}
	return "add to " + p.Add
}

// stepXMLPatches applies spec.xmlPatches to the built domain, last of all, and keeps it typed:
// the patched document is read back into a libvirtxml.Domain. A patch that libvirtxml cannot
// carry (an element or attribute it does not model would be dropped silently) is an error,
// found by re-applying it to the round-tripped document: a patch whose effect survived
// changes nothing there.
func stepXMLPatches(p *Builder, d *libvirtxml.Domain) error {
	patches := p.VM.Spec.XMLPatches
	if len(patches) == 0 {
		return nil
	}
	x, err := marshalCompact(d) // pooled, and no indentation to parse
	if err != nil {
		return err
	}
	doc, err := parseMarshaled(x)
	if err != nil {
		return fmt.Errorf("xmlPatches: read the built domain: %w", err)
	}
	marks := &patchMarks{}
	for i, pt := range patches {
		if err := pt.applyMarked(doc, marks); err != nil {
			return fmt.Errorf("spec.xmlPatches[%d] (%s): %w: %w", i, pt.what(), err, host.ErrInvalid)
		}
	}
	// Read the patched document back into a typed domain: only what the patches changed
	// when that can be placed (decoding the whole document was half of rendering a spec
	// with patches), else all of it.
	var out libvirtxml.Domain
	done := false
	if !p.Opts.wholeReadBack {
		if done, err = readBackMarked(d, doc, marks); err != nil {
			return fmt.Errorf("spec.xmlPatches: the patched domain is not a domain: %w: %w", err, host.ErrInvalid)
		}
		if done {
			out = *d
		}
	}
	if !done {
		var b bytes.Buffer
		doc.write(&b)
		// (*libvirtxml.Domain).Unmarshal is this, after copying the text once more.
		if err := xml.Unmarshal(b.Bytes(), &out); err != nil {
			return fmt.Errorf("spec.xmlPatches: the patched domain is not a domain: %w: %w", err, host.ErrInvalid)
		}
	}
	back, err := marshalCompact(&out)
	if err != nil {
		return fmt.Errorf("spec.xmlPatches: marshal the patched domain: %w", err)
	}
	backDoc, err := parseMarshaled(back)
	if err != nil {
		return fmt.Errorf("spec.xmlPatches: read the patched domain back: %w", err)
	}
	if err := keptSets(patches, back, backDoc); err != nil {
		return err
	}
	// The patched document (doc) against the typed round trip: an added element or
	// attribute libvirtxml does not model is missing from backDoc.
	if err := covers(doc, backDoc, "/"+doc.name); err != nil {
		return fmt.Errorf("spec.xmlPatches: %w: %w", err, host.ErrInvalid)
	}
	*d = out
	return nil
}

// keptSets checks that the typed round trip (back, backDoc) kept every set patch: applied
// again to it, they change nothing. All of them are applied to one copy first; only when that
// changes something is each applied alone, to name the one libvirtxml dropped. (Once per
// patch, it was half of rendering a spec with patches.) The first pass applies them to backDoc
// itself, not a copy: when they change nothing, backDoc is as it was; when they do, backDoc
// is read again from back (the document it was parsed from) before anything else.
func keptSets(patches []XMLPatch, back string, backDoc *xnode) error {
	n := 0
	for _, pt := range patches {
		if pt.Remove == "" && pt.Add == "" {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	// Applied again, the set patches note what they change (an attribute's or a text's
	// value, an element created): writing the document before and after to compare them
	// was most of keptSets' cost.
	var m patchMarks
	for _, pt := range patches {
		if pt.Remove == "" && pt.Add == "" {
			if err := pt.applyMarked(backDoc, &m); err != nil {
				break // the loop below names it
			}
		}
	}
	if len(m.changedEls) == 0 && len(m.addedEls) == 0 {
		return nil
	}
	var before, after bytes.Buffer
	fresh, err := parseMarshaled(back)
	if err != nil {
		return fmt.Errorf("spec.xmlPatches: read the patched domain back: %w", err)
	}
	*backDoc = *fresh
	backDoc.write(&before)
	for i, pt := range patches {
		if pt.Remove != "" || pt.Add != "" {
			continue // covers checks them, comparing documents
		}
		again := backDoc.clone()
		if err := pt.apply(again); err != nil {
			return fmt.Errorf("spec.xmlPatches[%d] (%s): libvirtxml does not keep it (%v): %w", i, pt.what(), err, host.ErrInvalid)
		}
		after.Reset()
		again.write(&after)
		if before.String() != after.String() {
			return fmt.Errorf("spec.xmlPatches[%d] (%s): libvirt's Go types (libvirtxml) do not model it, so it would be dropped: %w", i, pt.what(), host.ErrInvalid)
		}
	}
	return nil
}

// covers reports the first attribute or element of a that b lacks, by its path below where.
func covers(a, b *xnode, where string) error {
	var path []pathStep
	return coversPath(a, b, where, &path)
}

// coversPath is covers with the path below root kept as steps, spelt out only for an error:
// building every element's path and a map of its children's names was most of covers' cost.
func coversPath(a, b *xnode, root string, path *[]pathStep) error {
	where := func() string {
		var sb strings.Builder
		sb.WriteString(root)
		for _, s := range *path {
			sb.WriteString("/")
			sb.WriteString(s.String())
		}
		return sb.String()
	}
	for _, at := range a.attrs {
		if strings.HasPrefix(qname(at.Name), "xmlns") {
			continue
		}
		if _, ok := b.attr(qname(at.Name)); !ok {
			return fmt.Errorf("libvirt's Go types (libvirtxml) do not model %s/@%s, so it would be dropped", where(), qname(at.Name))
		}
	}
	for i, k := range a.kids {
		c, ok := k.(*xnode)
		if !ok {
			continue
		}
		// c is the index-th of total children of a named c.name; the path says [index] only
		// when there are several.
		index, total := 0, 0
		for j, k := range a.kids {
			if o, ok := k.(*xnode); ok && o.name == c.name {
				total++
				if j <= i {
					index++
				}
			}
		}
		var bc *xnode
		n := 0
		for _, k := range b.kids {
			if o, ok := k.(*xnode); ok && o.name == c.name {
				if n++; n == index {
					bc = o
					break
				}
			}
		}
		step := pathStep{name: c.name}
		if total != 1 {
			step.index = index
		}
		if bc == nil {
			return fmt.Errorf("libvirt's Go types (libvirtxml) do not model %s/%s, so it would be dropped", where(), step.String())
		}
		*path = append(*path, step)
		if err := coversPath(c, bc, root, path); err != nil {
			return err
		}
		*path = (*path)[:len(*path)-1]
	}
	return nil
}
