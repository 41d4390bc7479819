package clitree

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// FuzzAgentRequest: any body the agent's /v1/exec decodes, prepareRequest either refuses, or
// accepts as a command whose canonical command line, parsed by the command tree, is that same
// command with that same class, and whose typed request (a command with an operation) is that
// same command with that same class: the agent never authorizes one thing and runs another.
func FuzzAgentRequest(f *testing.F) {
	for _, s := range []string{
		`{"command":"inspect","flags":{"output":"json"}}`,
		`{"command":"bind","flags":{"dry-run":true},"operands":["0000:01:00.0"]}`,
		`{"command":"bind","flags":{"help":false},"operands":["-h=false"]}`,
		`{"command":"host install-unit","flags":{"exec":"/tmp/evil"},"operands":["-h=false","--help"]}`,
		`{"command":"kubevirt labels","flags":{"write":true}}`,
		`{"command":"mdev create","flags":{"parent":"--dry-run","type":"-h","count":2,"uuid":["a","b"]}}`,
		`{"command":"apply","flags":{"force":["boot-vga"],"no-start":true},"operands":["s.yaml"],"files":{"s.yaml":"x"}}`,
		`{"command":"vf enable","flags":{"count":1,"dry-run":false,"timeout":"2s"},"operands":["--","--dry-run"]}`,
		`{"args":["bind","-h=false","0000:01:00.0"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req agentapi.ExecRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if dec.Decode(&req) != nil || req.Command == "" {
			return
		}
		app := newApp(testEnv())
		job, cl, err := prepareRequest(app, req)
		if err != nil {
			return
		}
		// A command with an operation runs its typed request (issue 28): built from these
		// values, it names the same command and has the class the values have.
		if oc, fv, ok := operationOf(cl, req); ok {
			if op, err := oc.request(fv); err == nil {
				if op.Op() != job.Op || classOf(job.Op, op.Bool, op.IsSet) != job.Class {
					t.Fatalf("%s: authorized %s as a %s, its typed request is %s, a %s", body, job.Op, job.Class, op.Op(), classOf(job.Op, op.Bool, op.IsSet))
				}
			}
		}
		paths := map[string]string{}
		for _, name := range job.Files {
			paths[name] = "/nonexistent/private/" + "copy"
		}
		args, err := cl.argv(paths)
		if err != nil {
			t.Fatalf("%s: argv of an accepted request: %v", body, err)
		}
		var ran bool
		leaf := cl.path[len(cl.path)-1]
		leaf.Action = func(_ context.Context, cmd *cli.Command) error {
			ran = true
			if op := opName(cmd); op != job.Op {
				t.Fatalf("%s: authorized %s, the tree parsed %s from %q", body, job.Op, op, args)
			}
			if c := classOf(job.Op, cmd.Bool, cmd.IsSet); c != job.Class {
				t.Fatalf("%s: authorized %s as a %s, the tree parsed a %s from %q", body, job.Op, job.Class, c, args)
			}
			return nil
		}
		var out bytes.Buffer
		app.Writer, app.ErrWriter = &out, &out
		err = app.Run(context.Background(), append([]string{app.Name}, args...))
		if err == nil && !ran {
			t.Fatalf("%s: %q ran without reaching %s's action:\n%s", body, args, job.Op, out.String())
		}
	})
}
