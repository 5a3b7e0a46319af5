//go:build linux

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// noSandboxProvider creates nothing: every tool call that gets past its
// argument checks fails at acquiring the sandbox, so fuzzed arguments never
// run a command on this machine.
type noSandboxProvider struct{}

var errNoSandbox = errors.New("fuzzing: no sandboxes")

func (noSandboxProvider) Name() string { return "fuzz" }
func (noSandboxProvider) Create(context.Context, manage.SandboxConfig) (manage.Sandbox, error) {
	return manage.Sandbox{}, errNoSandbox
}
func (noSandboxProvider) Info(context.Context, string) (manage.Sandbox, error) {
	return manage.Sandbox{}, errNoSandbox
}
func (noSandboxProvider) Endpoint(context.Context, string) (manage.Endpoint, error) {
	return manage.Endpoint{}, errNoSandbox
}
func (noSandboxProvider) Pause(context.Context, string) error            { return errNoSandbox }
func (noSandboxProvider) Resume(context.Context, string) error           { return errNoSandbox }
func (noSandboxProvider) Kill(context.Context, string) error             { return errNoSandbox }
func (noSandboxProvider) List(context.Context) ([]manage.Sandbox, error) { return nil, nil }

// FuzzDecodeExecTools feeds random JSON arguments to workspace_exec and the
// process tools through their handlers (decodeArgs, the argument checks,
// then the sandbox, which never exists): a handler never panics and always
// returns an isError result.
func FuzzDecodeExecTools(f *testing.F) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := manage.New(manage.Options{Provider: noSandboxProvider{}, Logger: log})
	if err != nil {
		f.Fatal(err)
	}
	d := NewDeps(m, Config{}, log)
	tools := []Tool{WorkspaceExec(d), ProcessOutput(d), ProcessInput(d), ProcessSignal(d), ProcessList(d)}
	seeds := []struct {
		tool uint8
		args string
	}{
		{0, `{"command":"echo hi"}`},
		{0, `{"argv":["ls","-l"],"cwd":"sub","env":[{"name":"A","value":"b"}],"stdin":"x","timeout_sec":5,"background":true}`},
		{0, `{"command":"true","timeout_sec":1.5}`},
		{0, `{"command":"true","timeout_sec":-1}`},
		{0, `{"command":"true","timeout_sec":99999999999999999999}`},
		{0, `{"argv":[]}`},
		{0, `{"argv":[""],"env":[{"name":"=","value":"x"},{"name":"=","value":"y"}]}`},
		{0, `{"command":"a","argv":["b"]}`},
		{0, `{"cwd":"../..","command":"x"}`},
		{0, `null`},
		{0, `[]`},
		{0, `{"command":"\u0000"}`},
		{1, `{"process":"g1-p42","offset":10,"wait_sec":5,"max_bytes":100}`},
		{1, `{"process":"g1-r3"}`},
		{1, `{"process":"g0-p0","offset":-1}`},
		{1, `{"process":"g1-p42","max_bytes":99999999}`},
		{2, `{"process":"g1-p42","data":"hi\n","close":true}`},
		{2, `{"process":"g1-p42"}`},
		{3, `{"process":"g1-p42","signal":"KILL"}`},
		{3, `{"process":"g1-p42","signal":"HUP"}`},
		{4, `{}`},
		{4, `{"x":1}`},
	}
	for _, s := range seeds {
		f.Add(s.tool, []byte(s.args))
	}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		tool := tools[int(which)%len(tools)]
		req := mcp.CallToolRequest{}
		req.Params.Name = tool.Def.Name
		req.Params.Arguments = json.RawMessage(args)
		if !json.Valid(args) {
			// What the transport would hand over for a non-JSON body.
			req.Params.Arguments = nil
		}
		res, err := tool.Handler(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: handler error %v", tool.Def.Name, err)
		}
		if res == nil || !res.IsError || len(res.Content) == 0 {
			t.Fatalf("%s(%s): want an isError result, got %+v", tool.Def.Name, args, res)
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("%s: result does not marshal: %v", tool.Def.Name, err)
		}
	})
}
