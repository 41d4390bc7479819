package native

/*
#cgo pkg-config: libxml-2.0
#include <stdlib.h>
#include <string.h>
#include <libxml/parser.h>
#include <libxml/relaxng.h>
#include <libxml/xmlerror.h>

typedef struct { char msg[1024]; int n; } vh_errs;

// vh_err collects the validation errors, each with its line ("line 5: ..."), joined by "; ".
static void vh_err(void *data, xmlErrorPtr e) {
	vh_errs *errs = (vh_errs *)data;
	if (e == NULL) return;
	int line = e->line;
	if (line == 0 && e->node != NULL) line = (int)xmlGetLineNo((xmlNodePtr)e->node);
	size_t l = strlen(errs->msg);
	if (l + 8 >= sizeof errs->msg) return;
	if (line > 0)
		snprintf(errs->msg + l, sizeof errs->msg - l, "%sline %d: %s", errs->n++ ? "; " : "", line, e->message ? e->message : "invalid");
	else
		snprintf(errs->msg + l, sizeof errs->msg - l, "%s%s", errs->n++ ? "; " : "", e->message ? e->message : "invalid");
	l = strlen(errs->msg);
	while (l > 0 && (errs->msg[l-1] == '\n' || errs->msg[l-1] == ' ')) errs->msg[--l] = 0;
}

static xmlRelaxNGPtr vh_compile(const char *path) {
	xmlRelaxNGParserCtxtPtr pc = xmlRelaxNGNewParserCtxt(path);
	if (pc == NULL) return NULL;
	xmlRelaxNGPtr s = xmlRelaxNGParse(pc);
	xmlRelaxNGFreeParserCtxt(pc);
	return s;
}

// vh_validate: 0 valid, 1 invalid (errs says why), -1 not XML.
static int vh_validate(xmlRelaxNGPtr s, const char *buf, int len, vh_errs *errs) {
	xmlDocPtr doc = xmlReadMemory(buf, len, "domain.xml", NULL, XML_PARSE_NONET);
	if (doc == NULL) { snprintf(errs->msg, sizeof errs->msg, "not well-formed XML"); return -1; }
	xmlRelaxNGValidCtxtPtr vc = xmlRelaxNGNewValidCtxt(s);
	xmlRelaxNGSetValidStructuredErrors(vc, vh_err, errs);
	int r = xmlRelaxNGValidateDoc(vc, doc);
	xmlRelaxNGFreeValidCtxt(vc);
	xmlFreeDoc(doc);
	return r == 0 ? 0 : 1;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/vgpu-host/vgpu-host/host"
)

// DomainSchema is libvirt's domain schema, the one libvirtd validates against when asked to
// (VIR_DOMAIN_DEFINE_VALIDATE): Debian installs it with libvirt.
const DomainSchema = "/usr/share/libvirt/schemas/domain.rng"

// schema is DomainSchema compiled once per process: libvirtd parses the whole schema again on
// every validated define (about 10 ms here, as long as the define itself), while validating a
// domain against a compiled schema takes well under a millisecond. The agent's helper lives
// long, so it pays the compile once.
var schema struct {
	once sync.Once
	rng  C.xmlRelaxNGPtr
	mu   sync.Mutex // libxml2's RelaxNG validation of one schema, one document at a time
}

// compiledSchema returns the compiled schema, or nil when it cannot be had (no schema file):
// Define then asks libvirtd to validate, as before.
func compiledSchema() C.xmlRelaxNGPtr {
	schema.once.Do(func() {
		if _, err := os.Stat(DomainSchema); err != nil {
			return
		}
		p := C.CString(DomainSchema)
		defer C.free(unsafe.Pointer(p))
		schema.rng = C.vh_compile(p)
	})
	return schema.rng
}

// schemaHere is set by PrepareSchema: Define then checks domains against the compiled schema
// itself instead of asking libvirtd to.
var schemaHere atomic.Bool

// PrepareSchema makes Define check domains against DomainSchema compiled in this process, and
// compiles it now. The helper calls it, in its own goroutine, for a long-lived connection (the
// agent's), so the compile overlaps connecting to libvirt; a Define finds it compiled, or waits
// for the compile in flight. A process that defines one domain does not call it: compiling the
// schema costs more than libvirtd's check of one domain.
func PrepareSchema() {
	schemaHere.Store(true)
	compiledSchema()
}

// ValidateDomain checks xml against libvirt's domain schema (DomainSchema), the check
// VIR_DOMAIN_DEFINE_VALIDATE makes; ok is false when the schema is not available here.
// Errors name the first line libvirt's schema refuses and wrap host.ErrInvalid.
func ValidateDomain(xml string) (ok bool, err error) {
	s := compiledSchema()
	if s == nil {
		return false, nil
	}
	buf := C.CString(xml)
	defer C.free(unsafe.Pointer(buf))
	var errs C.vh_errs
	schema.mu.Lock()
	r := C.vh_validate(s, buf, C.int(len(xml)), &errs)
	schema.mu.Unlock()
	if r != 0 {
		return true, fmt.Errorf("the domain XML fails libvirt's schema %s: %s: %w", DomainSchema, C.GoString(&errs.msg[0]), host.ErrInvalid)
	}
	return true, nil
}
