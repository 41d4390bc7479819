// Package jsonindent writes JSON indented exactly as encoding/json's Encoder with
// SetIndent("", "  ") does, at a fraction of the cost: the CLI's `-o json` output.
//
// encoding/json indents by running its full validating scanner over the compact encoding, one
// state-machine step per byte; on the 64-GPU host's 900 KB inventory that took twice as long
// as the encoding itself (issue 19). The compact output of json.Marshal is valid and has no
// whitespace outside strings, so indenting it only needs to tell strings from punctuation.
package jsonindent

import (
	"encoding/json"
	"io"
)

// Encode writes v to w as json.NewEncoder(w) with SetIndent("", "  ") does: the same bytes
// (HTML characters escaped, a newline at the end). It writes them in pieces of 64 KiB, from
// the encoder's own buffer: no copy of the compact encoding and no buffer the size of the
// output (on the 64-GPU host's 900 KB inventory, those were 1.5 MB of fresh memory to fault
// in). Nothing is written when v cannot be encoded.
func Encode(w io.Writer, v any) error { return encode(w, v, 64<<10) }

// encode is Encode writing pieces of about chunk bytes.
func encode(w io.Writer, v any, chunk int) error {
	iw := &indentWriter{w: w, chunk: chunk}
	if err := json.NewEncoder(iw).Encode(v); err != nil {
		return err
	}
	return iw.err
}

// indentWriter indents what json.Encoder writes (the compact encoding and a newline, in one
// Write) onto w.
type indentWriter struct {
	w     io.Writer
	chunk int
	err   error
}

func (iw *indentWriter) Write(b []byte) (int, error) {
	compact := b
	if n := len(compact); n > 0 && compact[n-1] == '\n' {
		compact = compact[:n-1]
	}
	dst := indent(make([]byte, 0, iw.chunk+iw.chunk/4), compact, iw.chunk, func(full []byte) []byte {
		if iw.err == nil {
			_, iw.err = iw.w.Write(full)
		}
		return full[:0]
	})
	if iw.err == nil {
		_, iw.err = iw.w.Write(append(dst, '\n'))
	}
	if iw.err != nil {
		return 0, iw.err
	}
	return len(b), nil
}

// Append appends src, compact JSON as json.Marshal or json.Compact writes it, indented with
// two spaces per level and no prefix, to dst: what json.Indent(dst, src, "", "  ") appends.
// Input with whitespace outside strings is outside its contract.
func Append(dst, src []byte) []byte { return indent(dst, src, 0, nil) }

// indent is Append that, when flush is not nil, hands dst to flush whenever it holds chunk
// bytes or more and goes on appending to what flush returns.
func indent(dst, src []byte, chunk int, flush func([]byte) []byte) []byte {
	depth := 0
	for i := 0; i < len(src); i++ {
		if flush != nil && len(dst) >= chunk {
			dst = flush(dst)
		}
		switch c := src[i]; c {
		case '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return append(dst, src[i:]...)
			}
			dst = append(dst, src[i:j+1]...)
			i = j
		case '{', '[':
			if i+1 < len(src) && (src[i+1] == '}' || src[i+1] == ']') {
				dst = append(dst, c, src[i+1]) // {} and [] stay as they are
				i++
				continue
			}
			depth++
			dst = newline(append(dst, c), depth)
		case '}', ']':
			depth--
			dst = append(newline(dst, depth), c)
		case ',':
			dst = newline(append(dst, c), depth)
		case ':':
			dst = append(dst, c, ' ')
		default:
			// A run of a number or a literal: copy it up to the next punctuation.
			j := i + 1
			for j < len(src) && !punct(src[j]) {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j - 1
		}
	}
	return dst
}

func punct(c byte) bool {
	switch c {
	case '"', '{', '[', '}', ']', ',', ':':
		return true
	}
	return false
}

const spaces = "                                                                "

// newline appends a newline and depth levels of two spaces.
func newline(dst []byte, depth int) []byte {
	dst = append(dst, '\n')
	for n := 2 * depth; n > 0; {
		k := min(n, len(spaces))
		dst = append(dst, spaces[:k]...)
		n -= k
	}
	return dst
}
