package revert

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestFailUndoesNewestFirstAndOnce(t *testing.T) {
	var got []int
	r := New()
	for i := 1; i <= 3; i++ {
		r.Add(func() error {
			got = append(got, i)
			if i == 2 {
				return errors.New("two stuck")
			}
			return nil
		})
	}
	err := r.Fail()
	if !slices.Equal(got, []int{3, 2, 1}) || err == nil || !strings.Contains(err.Error(), "two stuck") {
		t.Fatalf("undo order %v, err %v", got, err)
	}
	if r.Fail() != nil || len(got) != 3 {
		t.Fatal("a second Fail ran the undos again")
	}
}

func TestSuccessKeeps(t *testing.T) {
	ran := false
	r := New()
	r.Add(func() error { ran = true; return nil })
	r.Success()
	if r.Fail() != nil || ran {
		t.Fatal("Fail after Success undid")
	}
}

func TestWrap(t *testing.T) {
	cause := errors.New("write failed")
	if Wrap(cause, nil) != cause {
		t.Fatal("no undo error: the cause alone")
	}
	w := Wrap(cause, errors.New("stuck"))
	if !errors.Is(w, cause) || !strings.Contains(w.Error(), "undo also failed, check by hand: stuck") {
		t.Fatal(w)
	}
}
