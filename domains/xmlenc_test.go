package domains_test

import (
	"encoding/xml"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-host/vgpu-host/domains"
)

// TestXMLEncExamples: the planned writer writes every example's domain as encoding/xml does,
// indented and compact.
func TestXMLEncExamples(t *testing.T) {
	t.Parallel()
	for _, r := range renderExamples(t) {
		checkXMLEnc(t, r.name, r.dom)
	}
}

// TestXMLEncMatchesEncodingXML holds the planned writer against encoding/xml (libvirtxml's own
// MarshalXML methods included) on random values: whole domains, and each type whose
// MarshalXML the writer mirrors, alone, and vgpu-host's own <metadata>. Union types get several members set at once, so the
// order in which a MarshalXML picks one is checked too. VGPU_XMLENC_SEED=N replays a seed,
// VGPU_XMLENC_ROUNDS=N runs longer. About 2 s.
func TestXMLEncMatchesEncodingXML(t *testing.T) {
	t.Parallel()
	seed := uint64(1)
	if s := os.Getenv("VGPU_XMLENC_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rounds := 300
	if s := os.Getenv("VGPU_XMLENC_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	g := &xmlGen{r: rand.New(rand.NewPCG(seed, 2))}
	for i := range rounds {
		d := g.value(reflect.TypeFor[libvirtxml.Domain](), 0).Addr().Interface()
		checkXMLEnc(t, "random domain "+strconv.Itoa(i)+" (seed "+strconv.FormatUint(seed, 10)+")", d)
		if t.Failed() {
			return
		}
	}
	for _, typ := range append(domains.XMLHookTypes(), reflect.TypeFor[domains.XMLMetadata]()) {
		for i := range rounds * 2 {
			v := g.value(typ, 2)
			// As a slice element (addressable, named by the field) and alone.
			checkXMLEnc(t, typ.Name()+" "+strconv.Itoa(i), v.Addr().Interface())
			s := reflect.New(reflect.SliceOf(typ))
			s.Elem().Set(reflect.Append(s.Elem(), v))
			checkXMLEnc(t, typ.Name()+" in a slice "+strconv.Itoa(i), s.Interface())
			if t.Failed() {
				return
			}
		}
	}
}

// checkXMLEnc compares the planned writer with encoding/xml on v, indented and compact.
func checkXMLEnc(t *testing.T, what string, v any) {
	t.Helper()
	for _, indent := range []bool{true, false} {
		got, err := domains.EncodeXML(v, indent)
		var want []byte
		var werr error
		if indent {
			want, werr = xml.MarshalIndent(v, "", "  ")
		} else {
			want, werr = xml.Marshal(v)
		}
		if (err != nil) != (werr != nil) {
			t.Fatalf("%s (indent %v): planned writer error %v, encoding/xml error %v", what, indent, err, werr)
		}
		if got != string(want) && werr == nil {
			t.Fatalf("%s (indent %v): the planned writer differs from encoding/xml:\n%s", what, indent, diffAt(got, string(want)))
		}
	}
}

// diffAt shows where a and b part.
func diffAt(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-300)
	return "got:  …" + a[lo:min(len(a), i+200)] + "\nwant: …" + b[lo:min(len(b), i+200)]
}

// xmlGen fills values of any libvirtxml type at random: pointers and slices thin out with
// depth, strings include characters that need escaping and bytes that are not UTF-8.
type xmlGen struct{ r *rand.Rand }

var genStrings = []string{"", "", "a", "pci", "usb", "virtio-serial", "xenbus", "nvme", "virtio", "0x1f", "x<y&\"z'>", "tab\tnl\ncr\r", "\xff\xfe", "é\u2028", "--", "-"}

func (g *xmlGen) value(t reflect.Type, depth int) reflect.Value {
	v := reflect.New(t).Elem()
	g.fill(v, depth)
	return v
}

func (g *xmlGen) fill(v reflect.Value, depth int) {
	// Chance that an optional part (pointer, slice) is present at this depth.
	present := func() bool { return depth < 12 && g.r.IntN(100) < 55-4*depth }
	switch v.Kind() {
	case reflect.Pointer:
		if present() {
			v.Set(reflect.New(v.Type().Elem()))
			g.fill(v.Elem(), depth+1)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[xml.Name]() {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				g.fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if present() {
				v.SetBytes([]byte(genStrings[g.r.IntN(len(genStrings))]))
			}
			return
		}
		for present() && v.Len() < 3 {
			e := reflect.New(v.Type().Elem()).Elem()
			g.fill(e, depth+1)
			v.Set(reflect.Append(v, e))
		}
	case reflect.String:
		v.SetString(genStrings[g.r.IntN(len(genStrings))])
	case reflect.Bool:
		v.SetBool(g.r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(g.r.IntN(300)) - 20)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(uint64(g.r.IntN(300)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(g.r.Float64() * 100)
	}
}

// Small types for the writer's corners that libvirtxml's domain may not reach today.
type (
	encNamed string
	encInner struct {
		Raw encNamed `xml:",innerxml"`
	}
	encInner2 struct {
		Raw *string `xml:",innerxml"`
	}
	encEmbed struct {
		A string `xml:"a,attr"`
		B string `xml:"b"`
	}
	encOuter struct {
		encEmbed
		C string `xml:"c,attr"`
	}
	encOuterExported struct {
		EncEmbedded
		C string `xml:"c,attr"`
		D string `xml:"d"`
	}
	EncEmbedded struct {
		A string `xml:"a,attr"`
		B string `xml:"b"`
	}
	encConflict struct {
		EncEmbedded
		B string `xml:"b"`
	}
	encNS struct {
		X *struct {
			XMLName xml.Name `xml:"urn:x thing"`
			V       string   `xml:"v,attr"`
		}
		Y string `xml:"urn:y why"`
	}
	encPtrMarshaler struct{ N int }
	encByValue      struct {
		M encPtrMarshaler   `xml:"m"`
		P *encPtrMarshaler  `xml:"p"`
		S []encPtrMarshaler `xml:"s"`
	}
	encText  struct{ V int }
	encTexts struct {
		T  encText  `xml:"t"`
		TA encText  `xml:"ta,attr"`
		TP *encText `xml:"tp"`
	}
	encChar struct {
		Text  string  `xml:",chardata"`
		Attr  *string `xml:"x,attr"`
		Empty string  `xml:"e,omitempty"`
		Ints  []int   `xml:"i"`
		F     float32 `xml:"f,attr"`
		B     bool    `xml:"b"`
	}
)

func (m *encPtrMarshaler) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	start.Attr = append(start.Attr, xml.Attr{Name: xml.Name{Local: "n"}, Value: strconv.Itoa(m.N)})
	return e.EncodeElement(struct{}{}, start)
}

func (t encText) MarshalText() ([]byte, error) { return []byte("text" + strconv.Itoa(t.V)), nil }

// TestXMLEncCorners: encoding/xml's rules the planned writer must keep or leave to
// encoding/xml, on small types: named strings in innerxml, embedded structs (exported,
// unexported, conflicting), namespaces, a pointer receiver's MarshalXML on values encoding/xml
// can and cannot address, TextMarshalers, chardata, omitempty, floats and bools.
func TestXMLEncCorners(t *testing.T) {
	t.Parallel()
	s := "<raw/>"
	for _, v := range []any{
		&encInner{Raw: "<b>x</b>"}, &encInner2{Raw: &s}, &encInner2{},
		&encOuter{encEmbed{"a", "b"}, "c"}, &encOuterExported{EncEmbedded{"a", "b"}, "c", "d"},
		&encConflict{EncEmbedded{"a", "b"}, "b2"},
		&encNS{Y: "y"}, &encNS{X: &struct {
			XMLName xml.Name `xml:"urn:x thing"`
			V       string   `xml:"v,attr"`
		}{V: "v"}},
		&encByValue{M: encPtrMarshaler{1}, P: &encPtrMarshaler{2}, S: []encPtrMarshaler{{3}}},
		encByValue{M: encPtrMarshaler{1}, P: &encPtrMarshaler{2}, S: []encPtrMarshaler{{3}}},
		[]encByValue{{M: encPtrMarshaler{4}}},
		&encTexts{T: encText{1}, TA: encText{2}, TP: &encText{3}},
		&encChar{Text: "a<b\n", Attr: &s, Ints: []int{1, -2}, F: 1.5, B: true},
		&encChar{},
	} {
		checkXMLEnc(t, reflect.TypeOf(v).String(), v)
	}
}
