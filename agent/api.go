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

	"github.com/vgpu-host/vgpu-host/internal/buildinfo"
)

// routes mounts every endpoint (docs/agent.md has the table).
func (s *Server) routes(mux *http.ServeMux) {
	v := "/" + APIVersion
	mux.HandleFunc("GET "+v+"/version", s.version)
	mux.HandleFunc("GET "+v+"/health", s.health)
	mux.HandleFunc("GET "+v+"/inventory", s.typed(func(*http.Request, []byte) ([]string, map[string]string, error) {
		return []string{"inspect"}, nil, nil
	}))
	mux.HandleFunc("GET "+v+"/check", s.typed(func(*http.Request, []byte) ([]string, map[string]string, error) {
		return []string{"check"}, nil, nil
	}, 3))
	mux.HandleFunc("GET "+v+"/status", s.typed(func(*http.Request, []byte) ([]string, map[string]string, error) {
		return []string{"status"}, nil, nil
	}))
	mux.HandleFunc("POST "+v+"/vms", s.typed(specArgs("apply")))
	mux.HandleFunc("POST "+v+"/plan", s.typed(specArgs("plan")))
	mux.HandleFunc("DELETE "+v+"/vms/{name}", s.typed(func(r *http.Request, _ []byte) ([]string, map[string]string, error) {
		n, err := operand("VM name", r.PathValue("name"))
		return []string{"destroy", n}, nil, err
	}))
	mux.HandleFunc("POST "+v+"/mdevs", s.typed(mdevCreateArgs))
	mux.HandleFunc("DELETE "+v+"/mdevs/{uuid}", s.typed(func(r *http.Request, _ []byte) ([]string, map[string]string, error) {
		u, err := operand("mdev UUID", r.PathValue("uuid"))
		args := []string{"mdev", "remove"}
		args = appendBoolQuery(args, r, "force", "undefine")
		return append(args, u), nil, err
	}))
	mux.HandleFunc("POST "+v+"/vfs", s.typed(vfArgs))
	mux.HandleFunc("POST "+v+"/bind", s.typed(bindArgs("bind")))
	mux.HandleFunc("POST "+v+"/unbind", s.typed(bindArgs("unbind")))
	mux.HandleFunc("POST "+v+"/host/restore", s.typed(func(r *http.Request, body []byte) ([]string, map[string]string, error) {
		var b struct {
			DryRun bool `json:"dry_run"`
		}
		if err := decodeStrict(body, &b); err != nil {
			return nil, nil, err
		}
		return flagIf([]string{"host", "restore"}, b.DryRun, "--dry-run"), nil, nil
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

// exec is POST /v1/exec: any command line, answered with what it printed and its exit code
// (status 200 whenever the command ran; the exit code says how it went).
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req ExecRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, 2, "exec request: %v", err)
		return
	}
	out := s.execute(r.Context(), req)
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

// argsFunc builds a typed endpoint's command line (before the global "-o json") and files.
type argsFunc func(r *http.Request, body []byte) ([]string, map[string]string, error)

// typed serves an endpoint as its command line with --output json: the command's JSON on
// success, an ErrorBody (with the command's JSON output, if any) and StatusOf(exit) when it
// fails. Exit codes listed in okCodes answer 200 with the output (check's 3: the report is
// the answer).
func (s *Server) typed(build argsFunc, okCodes ...int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		args, files, err := build(r, body)
		if err != nil {
			writeError(w, http.StatusBadRequest, 2, "%v", err)
			return
		}
		out := s.execute(r.Context(), ExecRequest{Args: append([]string{"--output", "json"}, args...), Files: files})
		if out.status != http.StatusOK {
			writeError(w, out.status, exitOfStatus(out.status), "%s", out.err)
			return
		}
		res := out.res
		w.Header().Set("X-Vgpu-Host-Exit-Code", strconv.Itoa(res.ExitCode))
		okCode := res.ExitCode == 0
		for _, c := range okCodes {
			okCode = okCode || c == res.ExitCode
		}
		if okCode && json.Valid([]byte(res.Stdout)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, res.Stdout)
			return
		}
		eb := struct {
			ErrorBody
			Output json.RawMessage `json:"output,omitempty"`
		}{ErrorBody: ErrorBody{Error: errorText(res.Stderr), ExitCode: res.ExitCode}}
		if out := bytes.TrimSpace([]byte(res.Stdout)); len(out) > 0 && json.Valid(out) {
			eb.Output = out
		}
		status := StatusOf(res.ExitCode)
		if res.ExitCode == 0 {
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

// operand checks a value that becomes a positional argument: never a flag.
func operand(what, v string) (string, error) {
	if v == "" || strings.HasPrefix(v, "-") || strings.ContainsAny(v, "\x00\n") {
		return "", fmt.Errorf("%s %q: empty, or starts with '-'", what, v)
	}
	return v, nil
}

func flagIf(args []string, on bool, flag string) []string {
	if on {
		return append(args, flag)
	}
	return args
}

// appendBoolQuery adds --NAME for each query parameter NAME that is true.
func appendBoolQuery(args []string, r *http.Request, names ...string) []string {
	for _, n := range names {
		if b, _ := strconv.ParseBool(r.URL.Query().Get(n)); b {
			args = append(args, "--"+n)
		}
	}
	return args
}

// specArgs is POST /v1/vms (apply) and /v1/plan: the body is the spec (YAML or JSON); query
// parameters no_start=true, force=CHECK (repeatable), virt_type=kvm|qemu.
func specArgs(command string) argsFunc {
	return func(r *http.Request, body []byte) ([]string, map[string]string, error) {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, nil, errors.New("the request body must be a VM spec (YAML or JSON, docs/spec.md)")
		}
		args := []string{command}
		args = appendBoolQuery(args, r, "no_start")
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "_", "-")
		}
		for _, f := range r.URL.Query()["force"] {
			args = append(args, "--force="+f)
		}
		if vt := r.URL.Query().Get("virt_type"); vt != "" {
			args = append(args, "--virt-type="+vt)
		}
		return append(args, "spec.yaml"), map[string]string{"spec.yaml": string(body)}, nil
	}
}

// mdevCreateArgs is POST /v1/mdevs.
func mdevCreateArgs(r *http.Request, body []byte) ([]string, map[string]string, error) {
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
		return nil, nil, err
	}
	args := []string{"mdev", "create", "--parent=" + b.Parent, "--type=" + b.Type}
	if b.Count != 0 {
		args = append(args, "--count="+strconv.Itoa(b.Count))
	}
	for _, u := range b.UUIDs {
		args = append(args, "--uuid="+u)
	}
	if b.Name != "" {
		args = append(args, "--name="+b.Name)
	}
	if b.FirstIndex != 0 {
		args = append(args, "--first-index="+strconv.Itoa(b.FirstIndex))
	}
	args = flagIf(args, b.Define, "--define")
	return flagIf(args, b.DryRun, "--dry-run"), nil, nil
}

// vfArgs is POST /v1/vfs: {"pf", "action": "enable"|"disable", "count", "driver", "persist", "force", "dry_run"}.
func vfArgs(r *http.Request, body []byte) ([]string, map[string]string, error) {
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
		return nil, nil, err
	}
	pf, err := operand("PF address", b.PF)
	if err != nil {
		return nil, nil, err
	}
	var args []string
	switch b.Action {
	case "enable":
		args = []string{"vf", "enable", "--count=" + strconv.Itoa(b.Count)}
		if b.Driver != "" {
			args = append(args, "--driver="+b.Driver)
		}
	case "disable":
		args = []string{"vf", "disable"}
	default:
		return nil, nil, fmt.Errorf("action %q: use enable or disable", b.Action)
	}
	args = flagIf(args, b.Persist, "--persist")
	args = flagIf(args, b.Force, "--force")
	args = flagIf(args, b.DryRun, "--dry-run")
	return append(args, pf), nil, nil
}

// bindArgs is POST /v1/bind and /v1/unbind: {"addresses": [...], "force", "persist", "dry_run"}.
func bindArgs(command string) argsFunc {
	return func(r *http.Request, body []byte) ([]string, map[string]string, error) {
		var b struct {
			Addresses []string `json:"addresses"`
			Force     bool     `json:"force"`
			Persist   bool     `json:"persist"`
			DryRun    bool     `json:"dry_run"`
		}
		if err := decodeStrict(body, &b); err != nil {
			return nil, nil, err
		}
		if len(b.Addresses) == 0 {
			return nil, nil, errors.New(`name the devices: {"addresses": ["0000:01:00.0"]}`)
		}
		args := []string{command}
		args = flagIf(args, b.Force, "--force")
		args = flagIf(args, b.Persist, "--persist")
		args = flagIf(args, b.DryRun, "--dry-run")
		for _, a := range b.Addresses {
			a, err := operand("PCI address", a)
			if err != nil {
				return nil, nil, err
			}
			args = append(args, a)
		}
		return args, nil, nil
	}
}
