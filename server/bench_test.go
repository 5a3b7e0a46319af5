package server

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// reportLatencies reports the median and 99th percentile of ds (ms).
func reportLatencies(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p int) float64 {
		return float64(ds[min(len(ds)-1, len(ds)*p/100)]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(50), "p50-ms")
	b.ReportMetric(at(99), "p99-ms")
}

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
	reportLatencies(b, ds)
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
// pipes.
func BenchmarkStdioExecTrue(b *testing.B) {
	e := newEnv(b, envOptions{noHTTP: true})
	c, _ := e.stdioClient(b, context.Background(), true)
	benchCalls(b, c, "workspace_exec", execTrue)
}

// BenchmarkConcurrentSessions: 32 HTTP sessions (one sandbox each) making 50
// calls each, all at once: workspace_exec `true` (exec), and test_whoami
// (noop: the server and the Manager without a process). One op is the
// whole run; p50/p99 are per call.
func BenchmarkConcurrentSessions(b *testing.B) {
	const sessions, calls = 32, 50
	e := newEnv(b, envOptions{})
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
			if n := errs.Load(); n > 0 {
				b.Fatalf("%d of %d calls failed", n, int64(b.N)*sessions*calls)
			}
			reportLatencies(b, all)
			b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "calls/s")
			b.ReportMetric(0, "errors")
		})
	}
}
