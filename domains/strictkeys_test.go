package domains_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-host/vgpu-host/domains"
	"github.com/vgpu-host/vgpu-host/host"
)

// bigSpecs returns two specs of nearly host.MaxSpecSize: one valid (80k SSH keys, as many
// nodes as the other has keys) and one with ~80k unknown keys under spec.
func bigSpecs(t testing.TB) (valid, unknown []byte) {
	const limit = host.MaxSpecSize - 64
	var v, u strings.Builder
	v.WriteString(minimal + "  cloudInit:\n    sshAuthorizedKeys:\n")
	for i := 0; v.Len() < limit-32; i++ {
		fmt.Fprintf(&v, "      - k%07d\n", i)
	}
	u.WriteString(minimal)
	n := 0
	for ; u.Len() < limit-32; n++ {
		fmt.Fprintf(&u, "  k%05d: 1\n", n)
	}
	if n < 75000 {
		t.Fatalf("only %d unknown keys", n)
	}
	return []byte(v.String()), []byte(u.String())
}

// fastest returns the shorter of two runs of fn.
func fastest(fn func()) time.Duration {
	best := time.Duration(1<<63 - 1)
	for range 2 {
		start := time.Now()
		fn()
		best = min(best, time.Since(start))
	}
	return best
}

// TestUnknownKeysLinear: every unknown key was explained by scanning every line of the spec,
// and yaml.v3 compared every key of a mapping with every later one, so a 1 MiB spec of 80k
// unknown keys cost 50 s of CPU. Now it is refused in about the time a valid spec of the same
// size takes to parse, listing the first keys and counting the rest.
func TestUnknownKeysLinear(t *testing.T) {
	t.Parallel()
	valid, unknown := bigSpecs(t)
	if _, err := domains.Parse(valid); err != nil {
		t.Fatalf("the valid spec: %v", err)
	}
	_, err := domains.Parse(unknown)
	if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), `line 8: unknown field "k00000" at spec.k00000`) ||
		!strings.Contains(err.Error(), "more unknown or repeated keys") || len(err.Error()) > 4096 {
		t.Fatalf("the spec of unknown keys: %.600v", err)
	}
	tv := fastest(func() { _, _ = domains.Parse(valid) })
	tu := fastest(func() { _, _ = domains.Parse(unknown) })
	t.Logf("valid %v, unknown keys %v (%d and %d bytes)", tv, tu, len(valid), len(unknown))
	if tu > 20*tv+100*time.Millisecond {
		t.Fatalf("a spec of unknown keys took %v, a valid one of the same size %v: more than 20 times", tu, tv)
	}
}

// TestRepeatedKeysLinear: 80k copies of one key are refused as quickly, naming the first
// repeat (yaml.v3 made one error per pair: billions).
func TestRepeatedKeysLinear(t *testing.T) {
	t.Parallel()
	valid, _ := bigSpecs(t)
	var b strings.Builder
	b.WriteString(minimal)
	for b.Len() < host.MaxSpecSize-64 {
		b.WriteString("  vcpus: 2\n")
	}
	rep := []byte(b.String())
	_, err := domains.Parse(rep)
	if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), `line 8: mapping key "vcpus" already defined at line 6`) {
		t.Fatalf("repeated keys: %.600v", err)
	}
	tv := fastest(func() { _, _ = domains.Parse(valid) })
	tr := fastest(func() { _, _ = domains.Parse(rep) })
	t.Logf("valid %v, repeated keys %v", tv, tr)
	if tr > 20*tv+100*time.Millisecond {
		t.Fatalf("a spec of repeated keys took %v, a valid one of the same size %v: more than 20 times", tr, tv)
	}
}

func BenchmarkParseUnknownKeys(b *testing.B) {
	valid, unknown := bigSpecs(b)
	b.Run("valid", func(b *testing.B) {
		for b.Loop() {
			_, _ = domains.Parse(valid)
		}
	})
	b.Run("unknown", func(b *testing.B) {
		for b.Loop() {
			_, _ = domains.Parse(unknown)
		}
	})
}
