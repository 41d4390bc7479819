package remote

import "testing"

// The names the kernel gives a program run as /proc/self/fd/N are the descriptor's number;
// a name that is not all digits is a program's own.
func TestFdName(t *testing.T) {
	for s, want := range map[string]bool{"3": true, "12": true, "": false, "vgpu-host-nvml": false, "3x": false, "x3": false} {
		if fdName(s) != want {
			t.Errorf("fdName(%q) = %v, want %v", s, !want, want)
		}
	}
}
