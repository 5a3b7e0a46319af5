//go:build linux

package tools

import (
	"context"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// The benchmarks run over the tests' harness: a managetest sandbox with the
// tools served over it.

// exec runs workspace_exec, which must succeed.
func (h *harness) exec(args map[string]any) { h.ok("workspace_exec", args, nil) }

// BenchmarkWorkspaceExecTrue is the whole path of a trivial command: MCP
// call, argument checks, lease, envd Run, result shaping. command goes
// through bash -c with the login environment captured on the first call;
// login goes through bash -lc (profiles read on each call); argv starts true
// directly, as BenchmarkEnvdRunTrue does.
func BenchmarkWorkspaceExecTrue(b *testing.B) {
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"command", map[string]any{"command": "true"}},
		{"login", map[string]any{"command": "true", "login": true}},
		{"argv", map[string]any{"argv": []string{"true"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b, harnessOptions{})
			h.exec(tc.args) // shell detection and capture, first connection
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				h.exec(tc.args)
			}
		})
	}
}

// BenchmarkEnvdRunTrue is the floor under BenchmarkWorkspaceExecTrue: the
// envd client's Run of true on the same kind of sandbox.
func BenchmarkEnvdRunTrue(b *testing.B) {
	l := newHarness(b, harnessOptions{}).lease()
	cmd := envdclient.Command{Cmd: "true", Cwd: l.Sandbox.Workdir}
	b.ReportAllocs()
	for b.Loop() {
		res, err := l.Client.Run(context.Background(), cmd, envdclient.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %v", err, res)
		}
	}
}

// BenchmarkWorkspaceExecOutput measures a command writing 10 MiB of stdout:
// the inline head and tail plus the log streamed into the sandbox.
func BenchmarkWorkspaceExecOutput(b *testing.B) {
	const size = 10 << 20
	h := newHarness(b, harnessOptions{})
	args := map[string]any{"command": "head -c 10485760 /dev/zero"}
	h.exec(args)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.exec(args)
	}
}

// BenchmarkEnvdRunOutput is the floor under BenchmarkWorkspaceExecOutput:
// the envd client's Run of the same command, keeping 32 KiB per stream and
// writing no log.
func BenchmarkEnvdRunOutput(b *testing.B) {
	const size = 10 << 20
	l := newHarness(b, harnessOptions{}).lease()
	cmd := envdclient.Command{Cmd: "head", Args: []string{"-c", "10485760", "/dev/zero"}, Cwd: l.Sandbox.Workdir}
	opts := envdclient.RunOptions{StdoutLimit: 32 << 10, StderrLimit: 32 << 10}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		res, err := l.Client.Run(context.Background(), cmd, opts)
		if err != nil || res.Stdout.Total != size {
			b.Fatalf("%v %v", err, res)
		}
	}
}
