package lazy

import (
	"sync"
	"testing"
)

func TestValueComputesOnce(t *testing.T) {
	calls := 0
	v := Value[int]{New: func() int { calls++; return 42 }}
	if calls != 0 {
		t.Fatal("New ran before Get")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := v.Get(); got != 42 {
				t.Errorf("Get = %d, want 42", got)
			}
		}()
	}
	wg.Wait()
	if calls != 1 {
		t.Fatalf("New ran %d times, want 1", calls)
	}
}

func TestRegexp(t *testing.T) {
	r := Regexp{Expr: `^([0-9]+)([a-z]*)$`}
	if !r.MatchString("12ab") || r.MatchString("ab12") {
		t.Fatal("MatchString disagrees with the expression")
	}
	if m := r.FindStringSubmatch("7kib"); len(m) != 3 || m[1] != "7" || m[2] != "kib" {
		t.Fatalf("FindStringSubmatch = %q", m)
	}
	if first, again := r.Get(), r.Get(); first != again {
		t.Fatal("Get compiled twice")
	}
}

func TestBadRegexpPanicsOnUse(t *testing.T) {
	r := Regexp{Expr: `(`}
	defer func() {
		if recover() == nil {
			t.Fatal("a bad expression did not panic on first use")
		}
	}()
	r.Get()
}

// pkgRegexp and pkgValue are declared as the package's users declare them.
var (
	pkgRegexp = Regexp{Expr: `a+`}
	pkgValue  = Value[map[string]int]{New: func() map[string]int { return map[string]int{"a": 1} }}
)

func TestPackageLevel(t *testing.T) {
	if !pkgRegexp.MatchString("aa") || pkgValue.Get()["a"] != 1 {
		t.Fatal("package-level values wrong")
	}
}
