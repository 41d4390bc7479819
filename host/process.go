package host

import (
	"fmt"
	"strconv"
	"strings"
)

// ProcessGroups returns the group IDs of process pid: its real, effective, saved and
// filesystem GIDs and its supplementary groups, from ROOT/proc/PID/status:
//
//	Gid:	1000	1000	1000	1000
//	Groups:	4 24 27 998 1000
//
// The agent asks it whether a peer on its socket is a member of its group.
func ProcessGroups(root Root, pid int) ([]int, error) {
	p := root.Proc(strconv.Itoa(pid), "status")
	s, err := root.readString(p)
	if err != nil {
		return nil, err
	}
	var out []int
	seen := map[int]bool{}
	found := false
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "Gid" && k != "Groups") {
			continue
		}
		found = found || k == "Gid"
		for _, f := range strings.Fields(v) {
			g, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("read %s: %s: not a group id: %s: %w", p, k, quoted(f), ErrInvalid)
			}
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("read %s: no Gid line: %w", p, ErrInvalid)
	}
	return out, nil
}
