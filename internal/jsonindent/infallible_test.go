package jsonindent

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/vgpu-host/vgpu-host/host"
)

type (
	plainElem struct {
		Name  string            `json:"name"`
		N     int64             `json:"n"`
		U     *uint8            `json:"u"`
		Tags  []string          `json:"tags"`
		Attrs map[string]string `json:"attrs"`
		ByN   map[int][]bool    `json:"by_n"`
		Inner struct{ On bool } `json:"inner"`
		Skip  float64           `json:"-"`
		//lint:ignore U1000 an unexported field, which the encoder must leave out
		quiet float64
		*embeddedPlain
	}
	embeddedPlain struct{ Deep [2]string }
	floatElem     struct{ F float64 }
	anyElem       struct{ V any }
	chanElem      struct{ C chan int }
	// selfElem contains itself: a cyclic value is an encoding error.
	selfElem  struct{ Next *selfElem }
	keyed     struct{ M map[textKey]int }
	textKey   string
	countElem struct {
		Name string   `json:"name"`
		Mark *counted `json:"mark"`
	}
	// counted declares that its MarshalJSON never fails, and counts its calls.
	counted struct{ calls *int }
	// fallibleMark has a MarshalJSON and no Infallible declaration.
	fallibleMark struct{ calls *int }
	fallibleElem struct {
		Mark fallibleMark `json:"mark"`
	}
)

func (textKey) MarshalText() ([]byte, error) { return []byte("k"), nil }

func (c *counted) MarshalJSON() ([]byte, error) { *c.calls++; return []byte(`"m"`), nil }
func (*counted) MarshalNeverFails()             {}

func (f fallibleMark) MarshalJSON() ([]byte, error) { *f.calls++; return []byte(`"f"`), nil }

// Only types in which nothing can fail are infallible: a float, an interface, a channel, a
// type of its own encoding without the Infallible mark, a map keyed by a TextMarshaler or a
// type that contains itself each make the whole type fallible.
func TestInfallible(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{plainElem{}, true},
		{&plainElem{}, true},
		{[]plainElem{}, true},
		{floatElem{}, false},
		{[]floatElem{}, false},
		{anyElem{}, false},
		{chanElem{}, false},
		{selfElem{}, false},
		{keyed{}, false},
		{countElem{}, true},
		{fallibleElem{}, false},
		{node{}, false}, // its F is a float64
	} {
		if got := infallible(reflect.TypeOf(c.v)); got != c.want {
			t.Errorf("infallible(%T) = %v, want %v", c.v, got, c.want)
		}
	}
}

// A long slice of an infallible element type is encoded once per element; of a fallible
// one, twice (the check before the first write, then the write). The bytes are
// json.Encoder's either way.
func TestEncodeInfallibleElementsOnce(t *testing.T) {
	type report struct {
		Head      string         `json:"head"`
		Marks     []countElem    `json:"marks"`
		Fallibles []fallibleElem `json:"fallibles"`
	}
	var once, twice int
	r := report{Head: "h"}
	for range 2 * minSplice {
		r.Marks = append(r.Marks, countElem{Name: "<x>", Mark: &counted{&once}})
		r.Fallibles = append(r.Fallibles, fallibleElem{Mark: fallibleMark{&twice}})
	}
	want := stdEncode(t, &r)
	once, twice = 0, 0
	var got bytes.Buffer
	if err := Encode(&got, &r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("Encode differs from json.Encoder:\n%s\nwant\n%s", got.Bytes(), want)
	}
	if n := len(r.Marks); once != n || twice != 2*n {
		t.Errorf("MarshalJSON calls: %d for %d infallible elements (want %d), %d for %d fallible ones (want %d)",
			once, n, n, twice, n, 2*n)
	}
}

// The inventory's long slices, which `inspect -o json` writes element by element, are
// infallible: a host's devices are encoded once (a third of inspect on the 64-GPU host was
// the second encoding). A float, an interface or an own encoder added to them fails this:
// decide then whether it can fail to encode, and mark it Infallible if it cannot.
func TestInventorySlicesInfallible(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[host.Device](), reflect.TypeFor[host.Group](), reflect.TypeFor[host.MdevParent]()} {
		if !infallible(typ) {
			t.Errorf("%v can fail to encode (infallible is false): Encode checks each one before writing", typ)
		}
	}
}
