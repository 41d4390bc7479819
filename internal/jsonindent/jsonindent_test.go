package jsonindent

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// stdEncode is what Encode must match: encoding/json's Encoder with two-space indentation.
func stdEncode(t testing.TB, v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

var samples = []string{
	`{}`, `[]`, `null`, `true`, `-1.5e+300`, `"x"`, `""`,
	`{"a":{},"b":[],"c":[{}],"d":[[]],"e":{"f":[1,2,{"g":null}]}}`,
	`{"s":"a \"quoted\" {[,:]} string","t":"ends in a backslash \\","u":"\\\"","v":"\u003cb\u003e \u2028 é"}`,
	`[1,-2,3.5,true,false,null,"",{"":""}]`,
	`{"deep":` + strings.Repeat(`[`, 40) + `1` + strings.Repeat(`]`, 40) + `}`,
	`[[1,[2,[3,{}]]],{"k":[]}]`,
}

// Append indents exactly as json.Indent does, on hand-picked and fuzzed compact JSON.
func TestAppendMatchesIndent(t *testing.T) {
	for _, s := range samples {
		checkIndent(t, []byte(s))
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		checkIndent(t, b)
	})
}

func checkIndent(t *testing.T, in []byte) {
	t.Helper()
	var compact bytes.Buffer
	if err := json.Compact(&compact, in); err != nil {
		t.Fatalf("%q: %v", in, err)
	}
	var want bytes.Buffer
	if err := json.Indent(&want, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	if got := Append(nil, compact.Bytes()); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("Append(%q) =\n%s\nwant\n%s", compact.Bytes(), got, want.Bytes())
	}
}

type node struct {
	Name     string            `json:"name"`
	HTML     string            `json:"html,omitempty"`
	N        int               `json:"n"`
	F        float64           `json:"f"`
	OK       *bool             `json:"ok"`
	Tags     []string          `json:"tags"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Children []node            `json:"children,omitempty"`
	Empty    struct{}          `json:"empty"`
}

func randomNode(r *rand.Rand, depth int) node {
	alphabet := []string{"a", "\"", "\\", "<", ">", "&", "{", "]", ",", ":", " ", "\n", "\t", "é", "\u2028", "\x01"}
	str := func() string {
		var s strings.Builder
		for range r.IntN(8) {
			s.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return s.String()
	}
	n := node{Name: str(), HTML: str(), N: r.IntN(2000) - 1000, F: r.NormFloat64() * 1e6, Tags: []string{}}
	if r.IntN(2) == 0 {
		b := r.IntN(2) == 0
		n.OK = &b
	}
	for range r.IntN(3) {
		n.Tags = append(n.Tags, str())
	}
	if r.IntN(2) == 0 {
		n.Attrs = map[string]string{str(): str(), str(): str()}
	}
	if depth > 0 {
		for range r.IntN(4) {
			n.Children = append(n.Children, randomNode(r, depth-1))
		}
	}
	return n
}

// Encode writes the bytes encoding/json's indenting Encoder writes, on random trees of
// structs, maps, slices, pointers and strings full of characters JSON escapes.
func TestEncodeMatchesEncoder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 19))
	for i := range 200 {
		v := randomNode(r, 4)
		var got bytes.Buffer
		if err := Encode(&got, v); err != nil {
			t.Fatal(err)
		}
		want := stdEncode(t, v)
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("tree %d: Encode differs from json.Encoder:\n%s\nwant\n%s", i, got.Bytes(), want)
		}
		// The same bytes when written in pieces of any size (Encode's are 64 KiB).
		var pieces countingBuffer
		if err := encode(&pieces, v, 1+i%97); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pieces.Bytes(), want) || len(want) > 200 && pieces.writes < 2 {
			t.Fatalf("tree %d: in pieces of %d bytes (%d writes), Encode differs from json.Encoder:\n%s\nwant\n%s", i, 1+i%97, pieces.writes, pieces.Bytes(), want)
		}
	}
	var got bytes.Buffer
	if err := Encode(&got, make(chan int)); err == nil {
		t.Error("Encode of a channel must fail as json.Marshal does")
	}
}

// countingBuffer is a bytes.Buffer that counts its writes (and, written through
// discardCounting, the bytes it was not given to keep).
type countingBuffer struct {
	bytes.Buffer
	writes int
	n      int
}

// Len is the bytes written.
func (c *countingBuffer) Len() int { return c.Buffer.Len() + c.n }

func (c *countingBuffer) Write(b []byte) (int, error) {
	c.writes++
	return c.Buffer.Write(b)
}

func BenchmarkEncode(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 19))
	v := []node{}
	for range 50 {
		v = append(v, randomNode(r, 4))
	}
	b.Run("jsonindent", func(b *testing.B) {
		for b.Loop() {
			Encode(&bytes.Buffer{}, v)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			stdEncode(b, v)
		}
	})
}
