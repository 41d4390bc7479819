// Package strictyaml decodes vgpu-host's YAML inputs (VM specs, host layouts) strictly: unknown
// and repeated keys, wrong types and fractional integers are errors naming the line and the
// field path, found in one pass over the document (linear in its size), before yaml.v3
// decodes it.
package strictyaml

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/internal/lazy"
)

// recordLines walks a YAML tree and maps every field path to the line of its key, and every
// scalar field to its value (to tell apart fields of a flow mapping that share a line).
func recordLines(n *yaml.Node, path string, lines map[string]int, values map[string]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			recordLines(c, path, lines, values)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			lines[p] = k.Line
			if v.Kind == yaml.ScalarNode {
				values[p] = v.Value
			}
			recordLines(v, p, lines, values)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = c.Line
			if c.Kind == yaml.ScalarNode {
				values[p] = c.Value
			}
			recordLines(c, p, lines, values)
		}
	}
}

// yaml.v3's messages, compiled on first use (a package-level MustCompile would run at every
// start of every binary that links this package).
var (
	unknownFieldRE = lazy.Regexp{Expr: `^line (\d+): field (\S+) not found in type \S+$`}
	cannotRE       = lazy.Regexp{Expr: "^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$"}
)

// explainDecodeError rewrites yaml.v3's messages ("field x not found in type domains.Spec")
// into ones that name the field path a user wrote.
func explainDecodeError(err error, lines map[string]int, values map[string]string) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return cleanYAMLError(err)
	}
	msgs := make([]string, 0, min(len(te.Errors), maxKeyErrors))
	for i, e := range te.Errors {
		if i == maxKeyErrors { // each message scans the lines: list a few, count the rest
			msgs = append(msgs, fmt.Sprintf("and %d more", len(te.Errors)-i))
			break
		}
		if m := unknownFieldRE.Get().FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			msgs = append(msgs, fmt.Sprintf("line %s: unknown field %q%s", m[1], m[2], atPath(lines, line, m[2])))
			continue
		}
		if m := cannotRE.Get().FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			field := pathAtLine(lines, values, line, m[3])
			if field == "" {
				field = "value"
			}
			got := yamlTagName(m[2])
			if m[3] != "" {
				got += " " + strconv.Quote(m[3])
			}
			msgs = append(msgs, fmt.Sprintf("line %s: %s: want %s, got %s", m[1], field, goTypeName(m[4]), got))
			continue
		}
		msgs = append(msgs, e)
	}
	return strings.Join(msgs, "; ")
}

// atPath returns " (at spec.gpus[0].foo)" for the unknown key name on line.
func atPath(lines map[string]int, line int, name string) string {
	for p, l := range lines {
		if l == line && (p == name || strings.HasSuffix(p, "."+name)) {
			return fmt.Sprintf(" at %s", p)
		}
	}
	return ""
}

// pathAtLine returns the field path on line that holds value (yaml.v3 quotes values longer
// than 10 characters as their first 7 and "..."), or else the deepest path on line. Map
// iteration order is random, so ties are broken by name to keep messages stable.
func pathAtLine(lines map[string]int, values map[string]string, line int, value string) string {
	prefix, truncated := strings.CutSuffix(value, "...")
	best, bestValue := "", false
	for p, l := range lines {
		if l != line {
			continue
		}
		v, scalar := values[p]
		isValue := value != "" && scalar && (v == value || truncated && strings.HasPrefix(v, prefix))
		switch {
		case isValue && !bestValue,
			isValue == bestValue && (len(p) > len(best) || len(p) == len(best) && p < best):
			best, bestValue = p, isValue
		}
	}
	return best
}

func goTypeName(t string) string {
	switch {
	case t == "int" || strings.HasPrefix(t, "uint") || strings.HasPrefix(t, "int"):
		return "an integer"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "*"):
		return "a mapping"
	}
	return "a mapping"
}

func yamlTagName(t string) string {
	switch t {
	case "seq":
		return "a list"
	case "map":
		return "a mapping"
	case "str":
		return "the string"
	case "int":
		return "the integer"
	case "float":
		return "the number"
	case "bool":
		return "the boolean"
	}
	return t
}

// KindName names a YAML node kind for messages ("mapping", "list", "alias", "scalar").
func KindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

func cleanYAMLError(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// LineOf returns the line of path in lines (Decode's), or of its deepest recorded ancestor:
// a field the file lacks ("configs.b.gpus[0].types") is told at the line of the entry that
// lacks it. 0 when none is recorded.
func LineOf(lines map[string]int, path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := lines[p]; ok {
			return l
		}
	}
	return 0
}

// parentPath is path without its last element ("a.b[0].c" → "a.b[0]" → "a.b" → "a" → "").
func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i > 0 {
		return p[:i]
	}
	return ""
}
