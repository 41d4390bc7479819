package host

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// forEachSplit calls f once for every index, whether it splits the work (64 or more, two Ps)
// or runs it in order, and in order when it does not split.
func TestForEachSplitCallsEachIndexOnce(t *testing.T) {
	t.Parallel()
	if runtime.GOMAXPROCS(0) < 2 {
		t.Log("one P: only the in-order path runs here")
	}
	for _, n := range []int{0, 1, 63, 64, 65, 100, 592, 1000} {
		calls := make([]atomic.Int32, n)
		var order []int
		var last atomic.Int64
		last.Store(-1)
		inOrder := true
		forEachSplit(n, func(i int) {
			calls[i].Add(1)
			if n < 64 {
				order = append(order, i)
				if int64(i) != last.Load()+1 {
					inOrder = false
				}
				last.Store(int64(i))
			}
		})
		for i := range calls {
			if c := calls[i].Load(); c != 1 {
				t.Fatalf("n=%d: index %d called %d times", n, i, c)
			}
		}
		if n < 64 && (!inOrder || len(order) != n) {
			t.Fatalf("n=%d: below the split size the calls were not in order: %v", n, order)
		}
	}
}
