package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
)

// kindCommands returns the commands that take a file of kind, one of the kinds of the files
// vgpu-host reads ("" for any other): a file of one given where another belongs is named as
// what it is before its fields are checked (a host layout given to render was "unknown field
// configs"). A switch, not a map: nothing is built at every start.
func kindCommands(kind string) string {
	switch kind {
	case "VirtualMachine":
		return "vgpu-host render, plan or apply FILE"
	case "HostLayout":
		return "vgpu-host host layout plan or apply FILE"
	}
	return ""
}

// Decode decodes one YAML document of at most host.MaxSpecSize bytes into v, strictly:
// unknown keys, wrong types, fractional numbers for integers, duplicate keys and a second
// document are errors naming the line and the field. what names the input in errors ("spec",
// "layout"); kind is the kind the file holds ("VirtualMachine"), and a file of another kind
// vgpu-host reads is refused as such, with the commands that take it. It returns every field
// path ("spec.gpus[0].passthrough") mapped to its line, for validation messages. Errors wrap
// host.ErrInvalid. VM specs (Parse) and host layouts (package layout) share it.
func Decode(data []byte, what, kind string, v any) (map[string]int, error) {
	one := "one " + kind + " per file"
	if len(data) > host.MaxSpecSize {
		return nil, fmt.Errorf("parse %s: %d bytes: %w: a %s is at most %d bytes (1 MiB): %w", what, len(data), host.ErrTooLarge, what, host.MaxSpecSize, host.ErrInvalid)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse %s: %s: %w", what, cleanYAMLError(err), host.ErrInvalid)
	}
	lines, values := map[string]int{}, map[string]string{}
	if len(root.Content) > 0 {
		recordLines(root.Content[0], "", lines, values)
		if k := values["kind"]; k != kind && kindCommands(k) != "" {
			return nil, fmt.Errorf("parse %s: line %d: kind %s, not %s: this file is for %s: %w", what, lines["kind"], k, kind, kindCommands(k), host.ErrInvalid)
		}
		// Before yaml.v3 sees the document: its own check of repeated keys is quadratic.
		if p := checkKeys(&root, v); len(p.msgs) > 0 {
			return nil, fmt.Errorf("parse %s: %s: %w", what, p, host.ErrInvalid)
		}
		if err := checkWholeNumbers(&root, v); err != nil {
			return nil, err
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("parse %s: empty document: %w", what, host.ErrInvalid)
		}
		return nil, fmt.Errorf("parse %s: %s: %w", what, explainDecodeError(err, lines, values), host.ErrInvalid)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("parse %s: line %d: more than one YAML document; %s: %w", what, extra.Line, one, host.ErrInvalid)
	}
	return lines, nil
}
