// Package jsonindent writes JSON indented exactly as encoding/json's Encoder with
// SetIndent("", "  ") does, at a fraction of the cost: the CLI's `-o json` output.
//
// encoding/json indents by running its full validating scanner over the compact encoding, one
// state-machine step per byte; on the 64-GPU host's 900 KB inventory that took twice as long
// as the encoding itself (issue 19). The compact output of json.Marshal is valid and has no
// whitespace outside strings, so indenting it only needs to tell strings from punctuation.
package jsonindent

import (
	"bytes"
	"encoding/json"
	"io"
)

// Encode writes v to w as json.NewEncoder(w) with SetIndent("", "  ") does: the same bytes
// (HTML characters escaped, a newline at the end). It writes them in pieces of 64 KiB, from
// the encoder's own buffer: no copy of the compact encoding and no buffer the size of the
// output (on the 64-GPU host's 900 KB inventory, those were 1.5 MB of fresh memory to fault
// in). Nothing is written when v cannot be encoded.
//
// A struct whose top-level members include long slices (inspect's devices and groups) is not
// encoded whole either: encoding/json builds the whole compact encoding in one buffer that
// doubles as it grows, 2 MB of fresh memory for that inventory's 0.57 MB, every page of it a
// page fault in a one-shot process. Encode encodes the rest of v (plan) and then each element
// on its own, into encoding/json's pooled buffer, and indents each piece as it comes. Every
// element is encoded once beforehand to find any error before the first write.
func Encode(w io.Writer, v any) error { return encode(w, v, 64<<10) }

// encode is Encode writing pieces of about chunk bytes.
func encode(w io.Writer, v any, chunk int) error {
	st := &stream{w: w, chunk: chunk, dst: make([]byte, 0, chunk+chunk/4)}
	if head, splices, ok := plan(v); ok {
		if err := check(splices); err != nil {
			return err
		}
		if err := spliced(st, head, splices); err != nil {
			return err
		}
		return st.end()
	}
	if err := json.NewEncoder(compactWriter{st}).Encode(v); err != nil {
		return err
	}
	return st.end()
}

// compactWriter indents what json.Encoder writes (the compact encoding and a newline, in one
// Write) into the stream.
type compactWriter struct{ st *stream }

func (c compactWriter) Write(b []byte) (int, error) {
	c.st.write(bytes.TrimSuffix(b, []byte{'\n'}))
	if c.st.err != nil {
		return 0, c.st.err
	}
	return len(b), nil
}

// Append appends src, compact JSON as json.Marshal or json.Compact writes it, indented with
// two spaces per level and no prefix, to dst: what json.Indent(dst, src, "", "  ") appends.
// Input with whitespace outside strings is outside its contract.
func Append(dst, src []byte) []byte {
	st := &stream{dst: dst}
	st.write(src)
	st.flushOpen()
	return st.dst
}

// stream indents compact JSON that arrives in pieces, each ending between two tokens (never
// inside a string), onto dst; with a writer w, it hands dst to w whenever it holds chunk bytes
// or more, and end writes the rest and a newline.
type stream struct {
	dst   []byte
	depth int
	// open is set after a "{" or "[" whose newline is not written yet: a "}" or "]" right
	// after keeps the pair as it is ("{}", "[]"), and may come in the next piece.
	open  bool
	w     io.Writer
	chunk int
	err   error
}

// write indents src onto the stream.
func (st *stream) write(src []byte) {
	for i := 0; i < len(src); i++ {
		if st.w != nil && len(st.dst) >= st.chunk {
			st.flush()
		}
		c := src[i]
		if st.open {
			st.open = false
			if c == '}' || c == ']' {
				st.dst = append(st.dst, c)
				continue
			}
			st.depth++
			st.dst = newline(st.dst, st.depth)
		}
		switch c {
		case '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				st.dst = append(st.dst, src[i:]...)
				return
			}
			st.dst = append(st.dst, src[i:j+1]...)
			i = j
		case '{', '[':
			st.dst = append(st.dst, c)
			st.open = true
		case '}', ']':
			st.depth--
			st.dst = append(newline(st.dst, st.depth), c)
		case ',':
			st.dst = newline(append(st.dst, c), st.depth)
		case ':':
			st.dst = append(st.dst, c, ' ')
		default:
			// A run of a number or a literal: copy it up to the next punctuation.
			j := i + 1
			for j < len(src) && !punct(src[j]) {
				j++
			}
			st.dst = append(st.dst, src[i:j]...)
			i = j - 1
		}
	}
}

// flushOpen writes the newline of a "{" or "[" that ended the input (only in input that is
// not JSON: Append's contract is json.Indent's bytes for valid input alone).
func (st *stream) flushOpen() {
	if st.open {
		st.open = false
		st.depth++
		st.dst = newline(st.dst, st.depth)
	}
}

// flush hands what the stream holds to w.
func (st *stream) flush() {
	if st.err == nil && len(st.dst) > 0 {
		_, st.err = st.w.Write(st.dst)
	}
	st.dst = st.dst[:0]
}

// end writes what is left and the final newline.
func (st *stream) end() error {
	st.flushOpen()
	st.dst = append(st.dst, '\n')
	st.flush()
	return st.err
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
