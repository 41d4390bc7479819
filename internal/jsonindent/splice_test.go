package jsonindent

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Shapes of top-level structs Encode splices, or must leave whole: long slices as plain,
// tagged, embedded (by pointer and by value) and shadowed members, beside omitempty, []byte,
// slices with their own marshaler and names two fields share.
type (
	// Inner is embedded by pointer (exported: an unexported one cannot be copied through
	// reflect, and is left whole).
	Inner struct {
		Items []node `json:"items"`
		Tail  string `json:"tail"`
	}
	// hiddenInner is embedded by an unexported pointer: encoding/json writes its members,
	// Encode leaves them whole.
	hiddenInner struct {
		Deep []node `json:"deep"`
	}
	// Shadow's Items hides Inner's (encoding/json keeps the shallower field).
	shadow struct {
		*Inner
		Items []node `json:"items"`
	}
	// Twins embeds two structs with the same member: encoding/json drops both.
	twinA struct {
		List []node // untagged: vet refuses a json tag two fields repeat
	}
	twinB struct {
		List []node
	}
	twins struct {
		twinA
		twinB
		N int `json:"n"`
	}
	mixed struct {
		*Inner
		Head   string    `json:"head"`
		Nodes  []node    `json:"nodes"`
		Ptrs   []*node   `json:"ptrs"`
		Maybe  []node    `json:"maybe,omitempty"`
		Bytes  []byte    `json:"bytes"`
		Names  []string  `json:"names"`
		Own    ownSlice  `json:"own"`
		Skip   []node    `json:"-"`
		Nested Inner     `json:"nested"`
		Floats []float64 `json:"floats"`
		hidden []node
		*hiddenInner
	}
	ownSlice []int
)

func (o ownSlice) MarshalJSON() ([]byte, error) { return []byte(`"own"`), nil }

func randomNodes(r *rand.Rand, n int) []node {
	out := make([]node, n)
	for i := range out {
		out[i] = randomNode(r, 1)
	}
	return out
}

// Encode, splicing or not, writes what json.Encoder writes, for every shape above with short
// and long slices, in pieces of any size; and plan splices what it can tell for sure.
func TestEncodeSplicedMatchesEncoder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 32))
	lengths := []int{0, 1, minSplice - 1, minSplice, 100}
	for i := range 60 {
		n := lengths[i%len(lengths)]
		ptrs := []*node{}
		for _, x := range randomNodes(r, n) {
			ptrs = append(ptrs, &x)
		}
		m := &mixed{Inner: &Inner{Items: randomNodes(r, n), Tail: "t"}, Head: "<h>", Nodes: randomNodes(r, n), Ptrs: ptrs,
			Maybe: randomNodes(r, n), Bytes: bytes.Repeat([]byte{'x'}, n), Names: make([]string, n), Own: make(ownSlice, n),
			Skip: randomNodes(r, n), Nested: Inner{Items: randomNodes(r, n)}, Floats: make([]float64, n), hidden: randomNodes(r, n),
			hiddenInner: &hiddenInner{Deep: randomNodes(r, n)}}
		if i%7 == 0 {
			m.Inner = nil
		}
		for _, v := range []any{m, *m, &shadow{Inner: &Inner{Items: randomNodes(r, n)}, Items: randomNodes(r, n)},
			&twins{twinA{randomNodes(r, n)}, twinB{randomNodes(r, n)}, n}, randomNodes(r, n)} {
			want := stdEncode(t, v)
			var got bytes.Buffer
			if err := Encode(&got, v); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("%T with %d elements: Encode differs from json.Encoder:\n%s\nwant\n%s", v, n, got.Bytes(), want)
			}
			var pieces countingBuffer
			if err := encode(&pieces, v, 1+i%97); err != nil || !bytes.Equal(pieces.Bytes(), want) {
				t.Fatalf("%T with %d elements, pieces of %d: %v\n%s\nwant\n%s", v, n, 1+i%97, err, pieces.Bytes(), want)
			}
		}
		// What is spliced: mixed's long plain slices (items through the embedded pointer,
		// nodes, ptrs, names, floats); never omitempty, []byte, an own marshaler, "-", a
		// nested struct's, unexported, under an unexported embedded pointer; shadow's outer items alone; twins' lists, which
		// encoding/json drops, never.
		_, s, ok := plan(m)
		want := 0
		if n >= minSplice {
			want = 5
			if m.Inner == nil {
				want = 4
			}
		}
		if ok != (want > 0) || len(s) != want {
			t.Errorf("%d elements: plan(mixed) spliced %d members (ok %v), want %d", n, len(s), ok, want)
		}
		if _, s, _ := plan(&twins{twinA{randomNodes(r, n)}, twinB{randomNodes(r, n)}, n}); len(s) != 0 {
			t.Errorf("plan(twins) spliced %d members, want none (encoding/json writes neither list)", len(s))
		}
		if _, s, _ := plan(&shadow{Inner: &Inner{Items: randomNodes(r, n)}, Items: randomNodes(r, n)}); n >= minSplice && len(s) != 1 {
			t.Errorf("plan(shadow) spliced %d members, want 1 (the outer items)", len(s))
		}
	}
}

// An element that cannot be encoded fails Encode before anything is written, as json.Marshal
// would fail; and the value given is never changed.
func TestEncodeSplicedErrorWritesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 32))
	m := &mixed{Inner: &Inner{Items: randomNodes(r, 50)}, Nodes: randomNodes(r, 50), Floats: make([]float64, 50)}
	m.Floats[49] = math.NaN()
	items := m.Inner.Items
	var out countingBuffer
	err := Encode(&out, m)
	var unsupported interface{ Error() string }
	if err == nil || !errors.As(err, &unsupported) || out.writes != 0 || out.Len() != 0 {
		t.Fatalf("Encode with a NaN element: %v, %d writes, want an error and nothing written", err, out.writes)
	}
	if len(m.Inner.Items) != 50 || &m.Inner.Items[0] != &items[0] || len(m.Nodes) != 50 || len(m.Floats) != 50 {
		t.Fatal("Encode changed the value it was given")
	}
}

// Spliced, a long inventory-like value is encoded in far less fresh memory than its compact
// encoding: the point of splicing (the whole encoding took twice its size, in a buffer that
// doubles as it grows).
func TestEncodeSplicedMemory(t *testing.T) {
	type flat struct { // no map: encoding/json allocates to sort a map's keys
		Name string   `json:"name"`
		N    int      `json:"n"`
		Tags []string `json:"tags"`
	}
	type report struct {
		*Inner
		Flats []flat `json:"flats"`
	}
	r := rand.New(rand.NewPCG(5, 32))
	m := &report{Inner: &Inner{Tail: "t"}}
	for i := range 20000 {
		m.Flats = append(m.Flats, flat{Name: randomNode(r, 0).Name, N: i, Tags: []string{"a", "<b>"}})
	}
	want := stdEncode(t, m)
	var sink countingBuffer
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := Encode(discardCounting{&sink}, m); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if sink.Len() != len(want) {
		t.Fatalf("wrote %d bytes, want %d", sink.Len(), len(want))
	}
	if used := after.TotalAlloc - before.TotalAlloc; used > uint64(len(want))/4 {
		t.Errorf("Encode of %d bytes allocated %d bytes, want under a quarter of the output", len(want), used)
	}
}

// discardCounting counts what is written to it without keeping it.
type discardCounting struct{ c *countingBuffer }

func (d discardCounting) Write(b []byte) (int, error) {
	d.c.writes++
	d.c.Buffer.Grow(0)
	d.c.n += len(b)
	return len(b), nil
}
