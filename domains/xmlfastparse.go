package domains

import (
	"encoding/xml"
	"strconv"
	"strings"
	"unicode/utf8"
)

// parseMarshaled reads a document encoding/xml wrote (marshalCompact's output) into the same
// tree parseXML builds, without encoding/xml's tokenizer: the two parses of stepXMLPatches were
// a quarter of rendering a spec with xmlPatches (#32). What encoding/xml writes is a small
// subset of XML (start and end tags, double-quoted attributes, text with the entities
// EscapeText writes); anything else (comments, CDATA, processing instructions, another entity,
// a stray character) sends the whole document to parseXML, so the tree is the same either way
// (TestParseMarshaledSameAsParseXML).
func parseMarshaled(s string) (*xnode, error) {
	if n, ok := fastParse(s); ok {
		return n, nil
	}
	return parseXML(s)
}

// fastParse is parseMarshaled's parser; ok is false for anything outside the subset.
func fastParse(s string) (root *xnode, ok bool) {
	if strings.Contains(s, "]]>") {
		return nil, false
	}
	for _, r := range s { // what the tokenizer refuses: invalid UTF-8, control characters
		if r == utf8.RuneError || !inCharacterRange(r) {
			return nil, false
		}
	}
	var stack []*xnode
	i := 0
	for i < len(s) {
		if s[i] != '<' {
			j := strings.IndexByte(s[i:], '<')
			if j < 0 {
				j = len(s) - i
			}
			text, ok := unescape(s[i : i+j])
			if !ok {
				return nil, false
			}
			if len(stack) == 0 {
				if strings.TrimSpace(text) != "" {
					return nil, false
				}
			} else {
				p := stack[len(stack)-1]
				p.kids = append(p.kids, xml.CharData(text))
			}
			i += j
			continue
		}
		i++
		if i < len(s) && s[i] == '/' { // an end tag
			j := strings.IndexByte(s[i:], '>')
			if j < 0 || len(stack) == 0 || s[i+1:i+j] != stack[len(stack)-1].name {
				return nil, false
			}
			stack = stack[:len(stack)-1]
			i += j + 1
			continue
		}
		name, n := xmlName(s[i:])
		if n == 0 {
			return nil, false // <!--, <![CDATA[, <?, <!DOCTYPE
		}
		i += n
		node := &xnode{name: name}
		for {
			if i >= len(s) {
				return nil, false
			}
			if s[i] == '>' {
				i++
				break
			}
			if s[i] != ' ' {
				return nil, false // />, another space, a newline: not what encoding/xml writes
			}
			i++
			an, n := xmlName(s[i:])
			if n == 0 || i+n+1 >= len(s) || s[i+n] != '=' || s[i+n+1] != '"' {
				return nil, false
			}
			i += n + 2
			j := strings.IndexByte(s[i:], '"')
			if j < 0 {
				return nil, false
			}
			v, ok := unescape(s[i : i+j])
			if !ok || strings.IndexByte(s[i:i+j], '<') >= 0 {
				return nil, false
			}
			node.attrs = append(node.attrs, xml.Attr{Name: splitName(an), Value: v})
			i += j + 1
		}
		if len(stack) == 0 {
			if root != nil {
				return nil, false
			}
			root = node
		} else {
			p := stack[len(stack)-1]
			p.kids = append(p.kids, node)
		}
		stack = append(stack, node)
	}
	if len(stack) > 0 || root == nil {
		return nil, false
	}
	return root, true
}

// xmlName returns the name at the start of s (ASCII letters, digits, '_', '-', '.', ':', the
// first a letter or '_', at most one ':') and its length; 0 when there is none.
func xmlName(s string) (string, int) {
	n := 0
	for n < len(s) {
		c := s[n]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || n > 0 && (c >= '0' && c <= '9' || c == '-' || c == '.' || c == ':') {
			n++
			continue
		}
		break
	}
	if strings.Count(s[:n], ":") > 1 {
		return "", 0 // the tokenizer refuses it
	}
	return s[:n], n
}

// splitName splits an attribute name at its colon as encoding/xml's RawToken does: a prefix
// and a local name when there is exactly one colon with text on both sides, else all local.
func splitName(s string) xml.Name {
	if strings.Count(s, ":") == 1 {
		if space, local, _ := strings.Cut(s, ":"); space != "" && local != "" {
			return xml.Name{Space: space, Local: local}
		}
	}
	return xml.Name{Local: s}
}

// unescape replaces the entities encoding/xml writes (&lt; &gt; &amp; &#34; &#39; &#x9; &#xA;
// &#xD;, and any other numeric or predefined one) by their characters; ok is false for a raw
// carriage return (the tokenizer would turn it into a newline) or an entity it does not know.
func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '\r') >= 0 {
		return "", false
	}
	if strings.IndexByte(s, '&') < 0 {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		j := strings.IndexByte(s, '&')
		if j < 0 {
			b.WriteString(s)
			return b.String(), true
		}
		b.WriteString(s[:j])
		s = s[j+1:]
		k := strings.IndexByte(s, ';')
		if k <= 0 {
			return "", false
		}
		ent := s[:k]
		s = s[k+1:]
		switch ent {
		case "lt":
			b.WriteByte('<')
		case "gt":
			b.WriteByte('>')
		case "amp":
			b.WriteByte('&')
		case "quot":
			b.WriteByte('"')
		case "apos":
			b.WriteByte('\'')
		default:
			if len(ent) < 2 || ent[0] != '#' {
				return "", false
			}
			var r uint64
			var err error
			if ent[1] == 'x' {
				r, err = strconv.ParseUint(ent[2:], 16, 32)
			} else {
				r, err = strconv.ParseUint(ent[1:], 10, 32)
			}
			if err != nil || !inCharacterRange(rune(r)) {
				return "", false
			}
			b.WriteRune(rune(r))
		}
	}
}

// inCharacterRange is XML's Char production, as encoding/xml checks it.
func inCharacterRange(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF
}
