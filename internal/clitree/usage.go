package clitree

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// setUsageHandlers makes every command of the tree answer a mistyped command or flag with one
// line, a did-you-mean when a name is close, and exit 2: urfave/cli would print the whole help
// for a flag, and exit 3 (the code `check` uses for "host not ready") for a command. A mistyped
// command is reported through *notFound (urfave/cli's hook returns nothing).
func setUsageHandlers(c *cli.Command, notFound *error) {
	c.OnUsageError = func(_ context.Context, cmd *cli.Command, err error, _ bool) error {
		msg := err.Error()
		if m := undefinedFlagRE.FindStringSubmatch(msg); m != nil {
			var names []string
			for _, f := range append(append([]cli.Flag{}, cmd.Flags...), cmd.Root().Flags...) {
				names = append(names, f.Names()...)
			}
			msg = fmt.Sprintf("unknown flag %s for %q", dashes(m[1]), cmd.FullName())
			if s := didYouMean(m[1], names); s != "" {
				msg += fmt.Sprintf("; did you mean %s?", dashes(s))
			}
		}
		return usageErr("%s (see %s --help)", msg, cmd.FullName())
	}
	if len(c.Commands) > 0 {
		c.CommandNotFound = func(_ context.Context, cmd *cli.Command, name string) {
			var names []string
			for _, sub := range cmd.Commands {
				if !sub.Hidden {
					names = append(names, sub.Names()...)
				}
			}
			msg := fmt.Sprintf("unknown command %q for %q", name, cmd.FullName())
			if s := didYouMean(name, names); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			*notFound = usageErr("%s (%s --help lists the commands)", msg, cmd.FullName())
		}
	}
	for _, sub := range c.Commands {
		setUsageHandlers(sub, notFound)
	}
}

// undefinedFlagRE is compiled on first use (a usage error), not at every start.
var undefinedFlagRE = lazy.Regexp{Expr: `flag provided but not defined: -+(\S+)`}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// didYouMean returns the name closest to typed by edit distance, or "" when none is close
// (more than a third of its letters, at least 2, would have to change) or typed is a prefix.
func didYouMean(typed string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		d := editDistance(strings.ToLower(typed), strings.ToLower(n))
		if strings.HasPrefix(n, typed) && len(typed) >= 3 {
			d = min(d, 1)
		}
		if best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" || bestD > max(2, len(typed)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance with adjacent transpositions counted as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
