package agent

import (
	"context"
	"os"
	"strings"
	"testing"
)

// fileRunner is a Runner whose command "read" reads the files named by its operands, and
// "none" reads none; Run records what the agent's temporary directory holds while it runs.
type fileRunner struct {
	tmp     string
	entries []string
}

func (r *fileRunner) Prepare(req ExecRequest) (Job, error) {
	j := Job{Request: req, Op: req.Command}
	if req.Command == "read" {
		j.Files = req.Operands
	}
	return j, nil
}

func (r *fileRunner) Run(_ context.Context, j Job, _ RunEnv) ExecResult {
	es, _ := os.ReadDir(r.tmp)
	for _, e := range es {
		r.entries = append(r.entries, e.Name())
	}
	var out strings.Builder
	for _, name := range j.Files {
		out.WriteString(name + "=" + j.Request.Files[name] + "\n")
	}
	return ExecResult{Stdout: out.String()}
}

// TestExecFiles: a request's files reach the Runner as the caller sent them, named by the
// caller's paths, and the agent writes no copy of them anywhere (its temporary directory holds
// only the test's socket directory while the command runs); a file the command reads that was
// not sent, one sent that it does not read, and files sent to a command that reads none are
// refused (exit 2) before it runs.
func TestExecFiles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	r := &fileRunner{tmp: tmp}
	s, _ := serve(t, r, nil)
	before, err := os.ReadDir(tmp)
	if err != nil || len(before) != 1 {
		t.Fatalf("TMPDIR holds %v (%v); want the test's socket directory only", before, err)
	}
	c := Client{Socket: s.Socket}
	ctx := context.Background()
	res, err := c.Exec(ctx, ExecRequest{Command: "read", Operands: []string{"/home/u/a.yaml", "../b.yaml"},
		Files: map[string]string{"/home/u/a.yaml": "A", "../b.yaml": "B"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "/home/u/a.yaml=A\n../b.yaml=B\n" {
		t.Fatalf("read: %v %+v", err, res)
	}
	if len(r.entries) != 1 || r.entries[0] != before[0].Name() {
		t.Errorf("while the command ran, TMPDIR held %v; want only %s (no private copies)", r.entries, before[0].Name())
	}
	for _, c2 := range []struct {
		req  ExecRequest
		want string
	}{
		{ExecRequest{Command: "read", Operands: []string{"/etc/shadow"}}, "read reads /etc/shadow: send its content in the request's files (the agent opens no file a caller names)"},
		{ExecRequest{Command: "read", Operands: []string{"a"}, Files: map[string]string{"a": "A", "b": "B"}}, `file "b" was sent but is not a file argument of read`},
		{ExecRequest{Command: "none", Files: map[string]string{"a": "A"}}, "files were sent but none reads none"},
	} {
		r.entries = nil
		res, err := c.Exec(ctx, c2.req)
		if err != nil || res.ExitCode != 2 || res.Stderr != "vgpu-host: "+c2.want+"\n" || r.entries != nil {
			t.Errorf("%+v: %v %+v (ran: %v); want exit 2: %s", c2.req, err, res, r.entries != nil, c2.want)
		}
	}
}
