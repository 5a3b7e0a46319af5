package tools

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	envdclient "github.com/sandbox-mcp/sandbox-mcp/envd/client"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// benchEnv is a managetest sandbox with the tools served over it.
type benchEnv struct {
	client *client.Client
	lease  *manage.Lease
}

func newBenchEnv(b *testing.B, cfg Config) *benchEnv {
	b.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := manage.New(manage.Options{Provider: managetest.New(b), AutoRecreate: true, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	ws := Workspace{Key: "bench:" + b.Name()}
	_, _, c := newToolServer(b, m, cfg, ws)
	l, err := m.Acquire(context.Background(), ws.Key, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Release)
	return &benchEnv{client: c, lease: l}
}

func (e *benchEnv) exec(b *testing.B, args map[string]any) {
	req := mcp.CallToolRequest{}
	req.Params.Name = "workspace_exec"
	req.Params.Arguments = args
	res, err := e.client.CallTool(context.Background(), req)
	if err != nil || res.IsError {
		b.Fatalf("%v %v", err, res)
	}
}

// BenchmarkWorkspaceExecTrue is the whole path of a trivial command: MCP
// call, argument checks, lease, envd Run, result shaping. command goes
// through bash -lc (profiles read); argv starts true directly, as
// BenchmarkEnvdRunTrue does.
func BenchmarkWorkspaceExecTrue(b *testing.B) {
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"command", map[string]any{"command": "true"}},
		{"argv", map[string]any{"argv": []string{"true"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newBenchEnv(b, Config{})
			e.exec(b, tc.args) // shell detection, first connection
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				e.exec(b, tc.args)
			}
		})
	}
}

// BenchmarkEnvdRunTrue is the floor under BenchmarkWorkspaceExecTrue: the
// envd client's Run of true on the same kind of sandbox.
func BenchmarkEnvdRunTrue(b *testing.B) {
	e := newBenchEnv(b, Config{})
	cmd := envdclient.Command{Cmd: "true", Cwd: e.lease.Sandbox.Workdir}
	b.ReportAllocs()
	for b.Loop() {
		res, err := e.lease.Client.Run(context.Background(), cmd, envdclient.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %v", err, res)
		}
	}
}

// BenchmarkWorkspaceExecOutput measures a command writing 10 MiB of stdout:
// the inline head and tail plus the log streamed into the sandbox.
func BenchmarkWorkspaceExecOutput(b *testing.B) {
	const size = 10 << 20
	e := newBenchEnv(b, Config{})
	args := map[string]any{"command": "head -c 10485760 /dev/zero"}
	e.exec(b, args)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e.exec(b, args)
	}
}

// BenchmarkEnvdRunOutput is the floor under BenchmarkWorkspaceExecOutput:
// the envd client's Run of the same command, keeping 32 KiB per stream and
// writing no log.
func BenchmarkEnvdRunOutput(b *testing.B) {
	const size = 10 << 20
	e := newBenchEnv(b, Config{})
	cmd := envdclient.Command{Cmd: "head", Args: []string{"-c", "10485760", "/dev/zero"}, Cwd: e.lease.Sandbox.Workdir}
	opts := envdclient.RunOptions{StdoutLimit: 32 << 10, StderrLimit: 32 << 10}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		res, err := e.lease.Client.Run(context.Background(), cmd, opts)
		if err != nil || res.Stdout.Total != size {
			b.Fatalf("%v %v", err, res)
		}
	}
}
