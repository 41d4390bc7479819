package domains

import "reflect"

// EncodeXML is the planned writer (xmlenc.go), for the external tests.
var EncodeXML = encodeXML

// XMLHookTypes are the types whose MarshalXML the writer mirrors.
func XMLHookTypes() []reflect.Type {
	var ts []reflect.Type
	for t := range xmlHooks() {
		ts = append(ts, t)
	}
	return ts
}

// XMLMetadata is what vgpu-host writes in a domain's <metadata>.
type XMLMetadata = metadata

// WholeReadBack makes xmlPatches decode the whole patched document, as before readBackMarked.
func WholeReadBack(o BuildOptions) BuildOptions {
	o.wholeReadBack = true
	return o
}
