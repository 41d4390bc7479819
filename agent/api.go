package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-host/vgpu-host/host"
	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
	"github.com/vgpu-host/vgpu-host/internal/jsonindent"
	"github.com/vgpu-host/vgpu-host/mdev"
	"github.com/vgpu-host/vgpu-host/ops"
	"github.com/vgpu-host/vgpu-host/vfio"
)

// routes mounts every endpoint (docs/agent.md has the table).
func (s *Server) routes(mux *http.ServeMux) {
	v := "/" + APIVersion
	mux.HandleFunc("GET "+v+"/version", s.version)
	mux.HandleFunc("GET "+v+"/health", s.health)
	mux.HandleFunc("GET "+v+"/inventory", s.operation(fixed(&ops.InventoryRequest{})))
	mux.HandleFunc("GET "+v+"/check", s.operation(fixed(&ops.CheckRequest{}), 3))
	mux.HandleFunc("GET "+v+"/status", s.operation(fixed(&ops.StatusRequest{})))
	mux.HandleFunc("POST "+v+"/vms", s.operation(specRequest("apply")))
	mux.HandleFunc("POST "+v+"/plan", s.operation(specRequest("plan")))
	mux.HandleFunc("DELETE "+v+"/vms/{name}", s.operation(func(r *http.Request, _ []byte) (Operation, error) {
		n, err := operand("VM name", r.PathValue("name"))
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml") {
			// The CLI reads a spec file's VM name; the agent opens no file a caller names.
			return nil, fmt.Errorf("destroy reads %s: send its content in the request's files (the agent opens no file a caller names)", n)
		}
		return &ops.DestroyRequest{Names: []string{n}}, nil
	}))
	mux.HandleFunc("POST "+v+"/mdevs", s.operation(mdevCreateRequest))
	mux.HandleFunc("DELETE "+v+"/mdevs/{uuid}", s.operation(func(r *http.Request, _ []byte) (Operation, error) {
		u, err := operand("mdev UUID", r.PathValue("uuid"))
		if err != nil {
			return nil, err
		}
		req := &ops.MdevRemoveRequest{IDs: []string{u}, Timeout: mdev.DefaultTimeout}
		req.Force, _ = strconv.ParseBool(r.URL.Query().Get("force"))
		req.Undefine, _ = strconv.ParseBool(r.URL.Query().Get("undefine"))
		return req, nil
	}))
	mux.HandleFunc("POST "+v+"/vfs", s.operation(vfRequest))
	mux.HandleFunc("POST "+v+"/bind", s.operation(bindRequest("bind")))
	mux.HandleFunc("POST "+v+"/unbind", s.operation(bindRequest("unbind")))
	mux.HandleFunc("POST "+v+"/host/restore", s.operation(func(r *http.Request, body []byte) (Operation, error) {
		var b struct {
			DryRun bool `json:"dry_run"`
		}
		if err := decodeStrict(body, &b); err != nil {
			return nil, err
		}
		return &ops.RestoreRequest{DryRun: b.DryRun, Timeout: mdev.DefaultTimeout}, nil
	}))
	mux.HandleFunc("GET "+v+"/mdev/types", s.operation(func(r *http.Request, _ []byte) (Operation, error) {
		p, err := optionalOperand("parent", r.URL.Query().Get("parent"))
		req := &ops.MdevTypesRequest{}
		if p != "" {
			req.Parent = &p
		}
		return req, err
	}))
	mux.HandleFunc("GET "+v+"/mdevs", s.operation(func(r *http.Request, _ []byte) (Operation, error) {
		q := r.URL.Query()
		p, err := optionalOperand("parent", q.Get("parent"))
		req := &ops.MdevListRequest{Parent: p}
		req.Defined, _ = strconv.ParseBool(q.Get("defined"))
		req.Active, _ = strconv.ParseBool(q.Get("active"))
		return req, err
	}))
	mux.HandleFunc("GET "+v+"/vfs", s.operation(func(r *http.Request, _ []byte) (Operation, error) {
		pf, err := optionalOperand("pf", r.URL.Query().Get("pf"))
		return &ops.VFListRequest{PF: pf}, err
	}))
	mux.HandleFunc("GET "+v+"/host/health", s.operation(func(r *http.Request, _ []byte) (Operation, error) {
		a, err := optionalOperand("address", r.URL.Query().Get("address"))
		return &ops.HealthRequest{Address: a}, err
	}))
	mux.HandleFunc("POST "+v+"/exec", s.exec)
	mux.HandleFunc("GET "+v+"/drift", func(w http.ResponseWriter, r *http.Request) {
		out := []any{}
		if s.Drifts != nil {
			out = append(out, s.Drifts()...)
		}
		writeJSON(w, http.StatusOK, out)
	})
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, 6, "no endpoint %s %s: the API is under /%s/ (docs/agent.md)", r.Method, r.URL.Path, APIVersion)
	})
}

// versionInfo is GET /v1/version.
type versionInfo struct {
	Version string `json:"version"`
	API     string `json:"api"`
	PID     int    `json:"pid"`
	Root    string `json:"host_root"`
	Socket  string `json:"socket"`
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, versionInfo{Version: buildinfo.Version(), API: APIVersion, PID: os.Getpid(), Root: s.Root.Dir(), Socket: s.Socket})
}

// healthInfo is GET /v1/health.
type healthInfo struct {
	Ready         bool    `json:"ready"`
	Reason        string  `json:"reason,omitempty"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Drifts counts the disagreements between the ledger and libvirt seen now (GET /v1/drift).
	Drifts int `json:"drifts"`
	// Libvirt says whether the agent reaches libvirt ("connected", "unreachable since …");
	// informative only: an unreachable libvirt leaves the agent ready (docs/agent.md).
	Libvirt string `json:"libvirt,omitempty"`
	// UnhealthyDevices are the devices whose last health check failed or that are
	// quarantined (docs/health.md), as the agent's health watch keeps them: a device that
	// leaves the bus, logs an AER error or reports a fatal NVIDIA Xid is here within seconds.
	// Informative only: they do not make the agent unready.
	UnhealthyDevices []deviceHealth `json:"unhealthy_devices,omitempty"`
	// HealthError says why the health files could not be read.
	HealthError string `json:"health_error,omitempty"`
}

// deviceHealth is one unhealthy device of /v1/health.
type deviceHealth struct {
	Address     host.Address   `json:"address"`
	Problems    []host.Problem `json:"problems,omitempty"`
	Quarantined bool           `json:"quarantined"`
	CheckedAt   *time.Time     `json:"checked_at,omitempty"`
}

// unhealthyDevices reads the health files and quarantine records under root.
func unhealthyDevices(root host.Root) ([]deviceHealth, error) {
	states, err := host.HealthStates(root)
	qs, qerr := host.Quarantines(root)
	byAddr := map[host.Address]*deviceHealth{}
	var order []host.Address
	for _, st := range states {
		if st.Last == nil || st.Last.Healthy {
			continue
		}
		at := st.Last.CheckedAt
		byAddr[st.Address] = &deviceHealth{Address: st.Address, Problems: st.Last.Problems, CheckedAt: &at}
		order = append(order, st.Address)
	}
	for _, q := range qs {
		d, ok := byAddr[q.Address]
		if !ok {
			d = &deviceHealth{Address: q.Address, Problems: q.Problems}
			byAddr[q.Address] = d
			order = append(order, q.Address)
		}
		d.Quarantined = true
	}
	var out []deviceHealth
	for _, a := range order {
		out = append(out, *byAddr[a])
	}
	return out, errors.Join(err, qerr)
}

// health answers 200 when the agent is ready, 503 with the reason when not.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	s.stateMu.Lock()
	ready, err := s.ready, s.readyErr
	s.stateMu.Unlock()
	h := healthInfo{Ready: ready && err == nil, UptimeSeconds: time.Since(s.started).Seconds()}
	if s.Drifts != nil {
		h.Drifts = len(s.Drifts())
	}
	if s.Libvirt != nil {
		h.Libvirt = s.Libvirt()
	}
	if devs, err := unhealthyDevices(s.Root); err != nil {
		h.HealthError = err.Error()
	} else {
		h.UnhealthyDevices = devs
	}
	switch {
	case !ready:
		h.Reason = "starting: bringing the host to its persisted state"
	case err != nil:
		h.Reason = err.Error()
	}
	code := http.StatusOK
	if !h.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// readBody reads a request body up to MaxBody; beyond it the answer is 413.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody()))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, http.StatusRequestEntityTooLarge, 2, "request body larger than %d bytes (the agent's limit)", mbe.Limit)
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, 2, "read the request body: %v", err)
		return nil, false
	}
	return b, true
}

// exec is POST /v1/exec: one typed command request (agentapi.ExecRequest), answered with what
// it printed and its exit code (status 200 whenever the command ran; the exit code says how it
// went). A command line ({"args": [...]}) is refused: the agent takes none. With Accept:
// application/x-ndjson the answer is a stream: a line per progress event as it happens, then
// one with the result.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req ExecRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, 2, "exec request: %v (the body is {\"command\", \"flags\", \"operands\", \"files\"}: docs/agent.md)", err)
		return
	}
	if req.Command == "" {
		writeError(w, http.StatusBadRequest, 2, "exec request: name the command: {\"command\": \"inspect\"} (docs/agent.md)")
		return
	}
	if wantsStream(r) {
		st := &stream{w: w}
		defer st.close()
		out := s.execute(r.Context(), req, st.event)
		switch {
		case out.status == http.StatusOK:
			st.line(StreamLine{Result: &out.res})
		case !st.hasStarted():
			writeError(w, out.status, exitOfStatus(out.status), "%s", out.err)
		}
		return
	}
	out := s.execute(r.Context(), req, nil)
	if out.status != http.StatusOK {
		writeError(w, out.status, exitOfStatus(out.status), "%s", out.err)
		return
	}
	writeJSON(w, http.StatusOK, out.res)
}

// exitOfStatus is the exit code the CLI gives a refusal before anything ran.
func exitOfStatus(status int) int {
	if status == http.StatusForbidden {
		return 4
	}
	return 1
}

// opFunc builds a typed endpoint's operation from the HTTP request, decoded strictly.
type opFunc func(r *http.Request, body []byte) (Operation, error)

// fixed is the operation of an endpoint that takes no parameters.
func fixed(op Operation) opFunc {
	return func(*http.Request, []byte) (Operation, error) { return op, nil }
}

// operation serves a typed endpoint by its operation, called directly through the Runner's
// Operator side (no command line): the operation's JSON on success, an ErrorBody (with the
// operation's JSON output, if any) and StatusOf(exit) when it fails. Exit codes listed in
// okCodes answer 200 with the output (check's 3: the report is the answer). The answer is
// the one the command with --output json gave: its JSON is encoded the same way. With Accept:
// application/x-ndjson the answer is a stream: a line per progress event as it happens, then
// one with the exit code, error and output (OperationDone).
func (s *Server) operation(build opFunc, okCodes ...int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		o, isOp := s.Runner.(Operator)
		if !isOp {
			writeError(w, http.StatusNotImplemented, 7, "this agent's runner has no typed operations (a bug in vgpu-host, please report it)")
			return
		}
		op, err := build(r, body)
		if err != nil {
			writeError(w, http.StatusBadRequest, 2, "%v", err)
			return
		}
		var st *stream
		var progress func(any)
		if wantsStream(r) {
			st = &stream{w: w}
			defer st.close()
			progress = st.event
		}
		out := s.runOperation(r.Context(), o, op, progress)
		if out.status != http.StatusOK {
			if st == nil || !st.hasStarted() {
				writeError(w, out.status, exitOfStatus(out.status), "%s", out.msg)
			}
			return
		}
		var printed bytes.Buffer
		if out.value != nil {
			if err := jsonindent.Encode(&printed, out.value); err != nil {
				printed.Reset()
				if out.code == 0 {
					out.code, out.errMsg = 1, fmt.Sprintf("encode %s's answer as JSON: %v", op.Op(), err)
				}
			}
		}
		if st != nil {
			done := &OperationDone{ExitCode: out.code, Error: out.errMsg}
			if p := bytes.TrimSpace(printed.Bytes()); len(p) > 0 {
				done.Output = p
			}
			st.line(StreamLine{Done: done})
			return
		}
		w.Header().Set("X-Vgpu-Host-Exit-Code", strconv.Itoa(out.code))
		okCode := out.code == 0
		for _, c := range okCodes {
			okCode = okCode || c == out.code
		}
		if okCode && printed.Len() > 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Write(printed.Bytes())
			return
		}
		eb := struct {
			ErrorBody
			Output json.RawMessage `json:"output,omitempty"`
		}{ErrorBody: ErrorBody{Error: out.errMsg, ExitCode: out.code}}
		if p := bytes.TrimSpace(printed.Bytes()); len(p) > 0 {
			eb.Output = p
		}
		status := StatusOf(out.code)
		if out.code == 0 {
			status = http.StatusInternalServerError // exit 0 without JSON: a bug
			eb.Error = "the command printed no JSON"
		}
		writeJSON(w, status, eb)
	}
}

// decodeStrict decodes JSON, refusing unknown fields; an empty body is an empty object.
func decodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("decode JSON body: more than one JSON value")
	}
	return nil
}

// optionalOperand is an operand a query may leave out: "" for none, else operand's checks.
func optionalOperand(what, v string) (string, error) {
	if v == "" {
		return "", nil
	}
	return operand(what, v)
}

// operand checks a value that becomes a positional argument: never a flag.
func operand(what, v string) (string, error) {
	if v == "" || strings.HasPrefix(v, "-") || strings.ContainsAny(v, "\x00\n") {
		return "", fmt.Errorf("%s %q: empty, or starts with '-'", what, v)
	}
	return v, nil
}

// specRequest is POST /v1/vms (apply) and /v1/plan: the body is the spec (YAML or JSON); query
// parameters no_start=true, force=CHECK (repeatable), virt_type=kvm|qemu. The spec is loaded
// by the operation, once the caller may run it, and named spec.yaml in its messages.
func specRequest(cmd string) opFunc {
	return func(r *http.Request, body []byte) (Operation, error) {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, errors.New("the request body must be a VM spec (YAML or JSON, docs/spec.md)")
		}
		q := r.URL.Query()
		noStart, _ := strconv.ParseBool(q.Get("no_start"))
		force := q["force"]
		for _, f := range force {
			// As --force's values from the CLI: one check each.
			if strings.ContainsRune(f, 0) || strings.Contains(f, ",") {
				raw, _ := json.Marshal(force)
				return nil, fmt.Errorf("flag %q: %s is not an array of strings without commas", "force", host.Clip(string(raw), 40))
			}
		}
		specs := []ops.Spec{{Path: "spec.yaml", Data: body}}
		if cmd == "plan" {
			return &ops.PlanRequest{Specs: specs, VirtType: q.Get("virt_type"), Force: force, NoStart: noStart}, nil
		}
		return &ops.ApplyRequest{Specs: specs, VirtType: q.Get("virt_type"), Force: force, NoStart: noStart}, nil
	}
}

// mdevCreateRequest is POST /v1/mdevs: {"parent", "type", "count", "uuids", "name",
// "first_index", "define", "dry_run"}; a count of 0 is none given.
func mdevCreateRequest(r *http.Request, body []byte) (Operation, error) {
	var b struct {
		Parent     string   `json:"parent"`
		Type       string   `json:"type"`
		Count      int      `json:"count"`
		UUIDs      []string `json:"uuids"`
		Name       string   `json:"name"`
		FirstIndex int      `json:"first_index"`
		Define     bool     `json:"define"`
		DryRun     bool     `json:"dry_run"`
	}
	if err := decodeStrict(body, &b); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name, v string
	}{{"parent", b.Parent}, {"type", b.Type}, {"name", b.Name}} {
		if err := noNUL(f.name, f.v); err != nil {
			return nil, err
		}
	}
	for _, u := range b.UUIDs {
		// As --uuid's values from the CLI: one UUID each.
		if strings.ContainsRune(u, 0) || strings.Contains(u, ",") {
			raw, _ := json.Marshal(b.UUIDs)
			return nil, fmt.Errorf("flag %q: %s is not an array of strings without commas", "uuid", host.Clip(string(raw), 40))
		}
	}
	return &ops.MdevCreateRequest{Parent: b.Parent, Type: b.Type, Count: b.Count, CountSet: b.Count != 0, UUIDs: b.UUIDs,
		Name: b.Name, FirstIndex: b.FirstIndex, Define: b.Define, DryRun: b.DryRun, Timeout: mdev.DefaultTimeout}, nil
}

// noNUL refuses a string value holding a NUL byte, in the words the agent has always used
// for a flag's value.
func noNUL(name, v string) error {
	if strings.ContainsRune(v, 0) {
		raw, _ := json.Marshal(v)
		return fmt.Errorf("flag %q: %s is not a JSON string", name, host.Clip(string(raw), 40))
	}
	return nil
}

// vfRequest is POST /v1/vfs: {"pf", "action": "enable"|"disable", "count", "driver", "persist", "force", "dry_run"}.
func vfRequest(r *http.Request, body []byte) (Operation, error) {
	var b struct {
		PF      string `json:"pf"`
		Action  string `json:"action"`
		Count   int    `json:"count"`
		Driver  string `json:"driver"`
		Persist bool   `json:"persist"`
		Force   bool   `json:"force"`
		DryRun  bool   `json:"dry_run"`
	}
	if err := decodeStrict(body, &b); err != nil {
		return nil, err
	}
	pf, err := operand("PF address", b.PF)
	if err != nil {
		return nil, err
	}
	if err := noNUL("driver", b.Driver); err != nil {
		return nil, err
	}
	switch b.Action {
	case "enable":
		drv := b.Driver
		if drv == "" {
			drv = mdev.DriverKeep // the CLI's default
		}
		return &ops.VFEnableRequest{PF: pf, Count: b.Count, Driver: drv, Persist: b.Persist, Force: b.Force, DryRun: b.DryRun, Timeout: mdev.DefaultTimeout}, nil
	case "disable":
		return &ops.VFDisableRequest{PF: pf, Persist: b.Persist, Force: b.Force, DryRun: b.DryRun, Timeout: mdev.DefaultTimeout}, nil
	}
	return nil, fmt.Errorf("action %q: use enable or disable", b.Action)
}

// bindRequest is POST /v1/bind and /v1/unbind: {"addresses": [...], "force", "persist", "dry_run"}.
func bindRequest(cmd string) opFunc {
	return func(r *http.Request, body []byte) (Operation, error) {
		var b struct {
			Addresses []string `json:"addresses"`
			Force     bool     `json:"force"`
			Persist   bool     `json:"persist"`
			DryRun    bool     `json:"dry_run"`
		}
		if err := decodeStrict(body, &b); err != nil {
			return nil, err
		}
		if len(b.Addresses) == 0 {
			return nil, errors.New(`name the devices: {"addresses": ["0000:01:00.0"]}`)
		}
		var addrs []string
		for _, a := range b.Addresses {
			a, err := operand("PCI address", a)
			if err != nil {
				return nil, err
			}
			addrs = append(addrs, a)
		}
		// The timeout is the command's default (--timeout), as when the CLI runs it.
		if cmd == "unbind" {
			return &ops.UnbindRequest{Addresses: addrs, Force: b.Force, Persist: b.Persist, DryRun: b.DryRun, Timeout: vfio.DefaultTimeout}, nil
		}
		return &ops.BindRequest{Addresses: addrs, Force: b.Force, Persist: b.Persist, DryRun: b.DryRun, Timeout: vfio.DefaultTimeout}, nil
	}
}
