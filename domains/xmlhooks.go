package domains

import (
	"reflect"
	"sync"
)

// xmlHooks are the libvirtxml types whose MarshalXML the writer mirrors (xmlenc.go).
var xmlHooks = sync.OnceValue(func() map[reflect.Type]xmlHook {
	return map[reflect.Type]xmlHook{}
})
