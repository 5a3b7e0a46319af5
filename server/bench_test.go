//go:build linux

package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// argv, not command: the comparison is with the envd client running `true`
// directly, without a login shell.
var execTrue = map[string]any{"argv": []any{"true"}}

// benchCalls calls tool with args through c until b.Loop ends.
func benchCalls(b *testing.B, c *mcpClient, tool string, args any) {
	c.ok(b, tool, args, nil) // the sandbox exists before timing
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := c.callErr(context.Background(), tool, args, nil)
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %v", tool, err, res)
		}
		ds = append(ds, time.Since(start))
	}
	envdtest.ReportPercentiles(b, ds)
}

// BenchmarkHTTPNoop: a call that acquires the sandbox and runs nothing in
// it (test_whoami), to show the transport's share of BenchmarkHTTPExecTrue.
func BenchmarkHTTPNoop(b *testing.B) {
	e := newEnv(b, envOptions{})
	for _, legacy := range []bool{true, false} {
		b.Run(map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy], func(b *testing.B) {
			benchCalls(b, e.client(b, clientOptions{legacy: legacy}), "test_whoami", nil)
		})
	}
}

// BenchmarkHTTPExecTrue: one workspace_exec `true` over streamable HTTP, with
// a session (2025-11-25) and stateless (2026-07-28).
func BenchmarkHTTPExecTrue(b *testing.B) {
	e := newEnv(b, envOptions{})
	for _, legacy := range []bool{true, false} {
		b.Run(map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy], func(b *testing.B) {
			benchCalls(b, e.client(b, clientOptions{legacy: legacy}), "workspace_exec", execTrue)
		})
	}
}

// BenchmarkStdioExecTrue: one workspace_exec `true` over in-process stdio
// pipes. Its baseline is BenchmarkEnvdRunTrue.
func BenchmarkStdioExecTrue(b *testing.B) {
	e := newEnv(b, envOptions{noHTTP: true})
	c, _ := e.stdioClient(b, context.Background(), true)
	benchCalls(b, c, "workspace_exec", execTrue)
}

// BenchmarkEnvdRunTrue is the baseline of the server benchmarks: the envd
// client's Run of `true` (as workspace_exec runs argv ["true"]: in the
// workdir, looked up in PATH) in the same kind of sandbox they use
// (managetest: an envd daemon in the test process), without MCP, the
// server or the tools.
func BenchmarkEnvdRunTrue(b *testing.B) {
	e := newEnv(b, envOptions{noHTTP: true})
	ws := e.srv.StdioWorkspace()
	l, err := e.manager.Acquire(context.Background(), ws.Key, ws.Named)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release()
	cmd := envdclient.Command{Cmd: "true", Cwd: l.Sandbox.Workdir}
	run := func() {
		res, err := l.Client.Run(context.Background(), cmd, envdclient.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run true: %+v %v", res, err)
		}
	}
	run() // the connection is warm before timing
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		run()
		ds = append(ds, time.Since(start))
	}
	envdtest.ReportPercentiles(b, ds)
}

// BenchmarkConcurrentSessions: 32 HTTP sessions (one sandbox each) making 50
// calls each, all at once: workspace_exec `true` (exec), and test_whoami
// (noop: the server and the Manager without a process). One op is the
// whole run; p50/p99 are per call. The sessions share one principal, whose
// concurrent-call limit is raised to let all of them run at once.
func BenchmarkConcurrentSessions(b *testing.B) {
	const sessions, calls = 32, 50
	e := newEnv(b, envOptions{maxCalls: sessions})
	clients := make([]*mcpClient, sessions)
	for i := range clients {
		clients[i] = e.client(b, clientOptions{legacy: true})
		clients[i].ok(b, "workspace_exec", execTrue, nil)
	}
	for _, bc := range []struct {
		name, tool string
		args       any
	}{{"exec", "workspace_exec", execTrue}, {"noop", "test_whoami", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			var all []time.Duration
			var errs atomic.Int64
			for b.Loop() {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for _, c := range clients {
					wg.Go(func() {
						ds := make([]time.Duration, 0, calls)
						for range calls {
							start := time.Now()
							res, err := c.callErr(context.Background(), bc.tool, bc.args, nil)
							if err != nil || res.IsError {
								errs.Add(1)
								continue
							}
							ds = append(ds, time.Since(start))
						}
						mu.Lock()
						all = append(all, ds...)
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			envdtest.ReportPercentiles(b, all)
			b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "calls/s")
			b.ReportMetric(float64(errs.Load()), "errors")
			if n := errs.Load(); n > 0 {
				b.Errorf("%d of %d calls failed", n, int64(b.N)*sessions*calls)
			}
		})
	}
}
