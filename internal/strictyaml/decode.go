package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"

	"github.com/vgpu-host/vgpu-host/host"
)

// Decode decodes one YAML document of at most host.MaxSpecSize bytes into v, strictly:
// unknown keys, wrong types, fractional numbers for integers, duplicate keys and a second
// document are errors naming the line and the field. what names the input in errors ("spec",
// "layout"); one says what a file holds ("one VirtualMachine per file"). It returns every
// field path ("spec.gpus[0].passthrough") mapped to its line, for validation messages.
// Errors wrap host.ErrInvalid. VM specs (Parse) and host layouts (package layout) share it.
func Decode(data []byte, what, one string, v any) (map[string]int, error) {
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
