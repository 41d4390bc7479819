package clitree

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/vgpu-host/vgpu-host/agent/agentapi"
)

// FuzzAgentRequest: any body the agent's /v1/exec decodes, prepareRequest either refuses, or
// accepts as a command with an operation (the agent runs no command line), whose typed request,
// when its builder takes the values, is that same command with that same class: the agent
// never authorizes one thing and runs another.
func FuzzAgentRequest(f *testing.F) {
	for _, s := range []string{
		`{"command":"inspect","flags":{"output":"json"}}`,
		`{"command":"bind","flags":{"dry-run":true},"operands":["0000:01:00.0"]}`,
		`{"command":"bind","flags":{"help":false},"operands":["-h=false"]}`,
		`{"command":"host install-unit","flags":{"exec":"/tmp/evil"},"operands":["-h=false","--help"]}`,
		`{"command":"host install-unit","flags":{"exec":"/tmp/evil","dry-run":true}}`,
		`{"command":"migrate-target","flags":{"request":"{\"op\":\"plan\",\"vm\":\"x\"}"}}`,
		`{"command":"migrate-target","operands":["abort","x"]}`,
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
		oc, fv, ok := operationOf(cl, req)
		if !ok {
			t.Fatalf("%s: accepted %s, which has no operation", body, job.Op)
		}
		if op, err := oc.request(fv); err == nil {
			if op.Op() != job.Op || classOf(job.Op, op.Bool, op.IsSet) != job.Class {
				t.Fatalf("%s: authorized %s as a %s, its typed request is %s, a %s", body, job.Op, job.Class, op.Op(), classOf(job.Op, op.Bool, op.IsSet))
			}
		}
	})
}
