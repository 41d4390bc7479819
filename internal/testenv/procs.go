package testenv

import (
	"os"
	"strconv"
	"testing"
)

// Processes returns the pid of every process this machine's /proc lists now, for tests that
// look for the processes they started (a helper by its executable, an agent's children).
func Processes(tb testing.TB) []int {
	tb.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
