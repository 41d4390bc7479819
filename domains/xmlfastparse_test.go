package domains

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// TestParseMarshaledSameAsParseXML: on every rendered golden domain, written compact as
// stepXMLPatches writes it, and on documents at the edges of what the fast parser takes, the
// tree is the one parseXML builds (or both refuse the document).
func TestParseMarshaledSameAsParseXML(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join("testdata", "*.xml"))
	if err != nil || len(goldens) < 8 {
		t.Fatalf("found %d golden domains (%v)", len(goldens), err)
	}
	var docs []string
	for _, g := range goldens {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		var d libvirtxml.Domain
		if err := d.Unmarshal(string(b)); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		x, err := marshalCompact(&d)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := fastParse(x); !ok {
			t.Errorf("%s: the fast parser refused encoding/xml's own output", g)
		}
		docs = append(docs, x)
	}
	docs = append(docs,
		`<domain type="kvm"><name>a &amp; b &lt;c&gt; &#34;d&#34; &#39;e&#39;&#x9;&#xA;&#xD;é ☃</name></domain>`,
		`<domain a:b="1" xmlns:a="urn:x" g:="3"><q:x>t</q:x></domain>`,
		`<domain :f="3"></domain>`,
		`<domain c:d:e="2"></domain>`,
		`<domain><description>&#65;&#x42;&quot;&apos;</description></domain>`,
		"  <domain></domain>\n",
		`<domain><!-- a comment --></domain>`,
		`<domain><![CDATA[x < y]]></domain>`,
		`<?xml version="1.0"?><domain></domain>`,
		`<domain a='1'></domain>`,
		`<domain a="1"/>`,
		`<domain  a="1"></domain>`,
		"<domain>a\r\nb</domain>",
		`<domain>&#0;</domain>`,
		`<domain>&#xD800;</domain>`,
		`<domain>&nbsp;</domain>`,
		`<domain>&#x;</domain>`,
		`<domain>&amp</domain>`,
		`<domain>]]></domain>`,
		"<domain>\x01</domain>",
		"<domain>\xff</domain>",
		`<domain a="<"></domain>`,
		`<domain></other>`,
		`<domain></domain><domain></domain>`,
		`<domain><a></domain>`,
		`text<domain></domain>`,
		`<domain></domain >`,
		``,
	)
	fast := 0
	for _, doc := range docs {
		want, werr := parseXML(doc)
		got, gerr := parseMarshaled(doc)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Errorf("%.80q: parseMarshaled's error %v, parseXML's %v", doc, gerr, werr)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%.80q: trees differ:\n got %#v\nwant %#v", doc, got, want)
		}
		if _, ok := fastParse(doc); ok {
			fast++
		}
	}
	// The goldens and the first four hand-written documents take the fast path.
	if fast != len(goldens)+4 {
		t.Errorf("the fast parser took %d documents, want %d", fast, len(goldens)+4)
	}
	if strings.Contains(docs[0], "\n") {
		t.Errorf("marshalCompact wrote a newline: %.80q", docs[0])
	}
}
