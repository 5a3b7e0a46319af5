//go:build linux

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

func TestLostDaemonRecreatesSandbox(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, legacy := range []bool{true, false} {
		t.Run(map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy], func(t *testing.T) {
			c := e.client(t, clientOptions{legacy: legacy, workspace: fmt.Sprintf("lost-%v", legacy)})
			var w whoami
			c.ok(t, "test_whoami", nil, &w)
			c.ok(t, "workspace_exec", map[string]any{"command": "true"}, nil)
			if err := e.provider.LoseDaemon(w.SandboxID, false); err != nil {
				t.Fatal(err)
			}
			res := c.call(t, "workspace_exec", map[string]any{"command": "echo after"})
			text := resultText(res)
			if !res.IsError || !strings.Contains(text, "NOTICE:") || !strings.Contains(text, "recreated") {
				t.Fatalf("first call after the loss: isError=%v %s", res.IsError, text)
			}
			var out struct {
				Stdout string `json:"stdout"`
			}
			c.ok(t, "workspace_exec", map[string]any{"command": "echo after"}, &out)
			if out.Stdout != "after\n" {
				t.Fatalf("second call after the loss: %+v", out)
			}
			var w2 whoami
			c.ok(t, "test_whoami", nil, &w2)
			if w2.SandboxID == w.SandboxID || w2.Generation != w.Generation+1 {
				t.Fatalf("after recreation: %+v, before: %+v", w2, w)
			}
		})
	}
}

// progressValues returns the progress values of ns for token.
func progressValues(t testing.TB, ns []mcp.JSONRPCNotification, token string) []float64 {
	t.Helper()
	var out []float64
	for _, n := range ns {
		raw, err := json.Marshal(n.Params)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Token    any     `json:"progressToken"`
			Progress float64 `json:"progress"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(p.Token) == token {
			out = append(out, p.Progress)
		}
	}
	return out
}

// TestProgressLastNotificationArrives sends three notifications per call,
// the last right before the handler returns, many times. Plain mcp-go loses
// that last one in most calls with sessions (the event store fixes it) and
// in about one call in six without (flushNotifications fixes it).
func TestProgressLastNotificationArrives(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, legacy := range []bool{true, false} {
		t.Run(map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy], func(t *testing.T) {
			c := e.client(t, clientOptions{legacy: legacy})
			for i := range 100 {
				tok := fmt.Sprintf("p%d", i)
				if _, err := c.callErr(context.Background(), "test_progress", map[string]any{"n": 3}, tok); err != nil {
					t.Fatal(err)
				}
				if got := progressValues(t, c.progress(), tok); !slices.Equal(got, []float64{1, 2, 3}) {
					t.Fatalf("call %d: progress %v, want [1 2 3]", i, got)
				}
			}
		})
	}
}

// TestExecProgressOverHTTP runs a 3 s command with a progress token and
// checks that every notification the server queued for it arrived, the last
// one included (the server side is counted by an innermost middleware).
func TestExecProgressOverHTTP(t *testing.T) {
	e := newEnv(t, envOptions{})
	var mu sync.Mutex
	queued := map[string]*atomic.Int64{}
	e.srv.MCP().Use(func(next mcpserver.ToolHandlerFunc) mcpserver.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
				return next(ctx, req)
			}
			n := new(atomic.Int64)
			mu.Lock()
			queued[fmt.Sprint(req.Params.Meta.ProgressToken)] = n
			mu.Unlock()
			return next(e.srv.MCP().WithContext(ctx, countingSession{ClientSession: mcpserver.ClientSessionFromContext(ctx), queued: n}), req)
		}
	})
	for _, legacy := range []bool{true, false} {
		name := map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy]
		t.Run(name, func(t *testing.T) {
			tok := "exec-" + name
			got := testExecProgress(t, e.client(t, clientOptions{legacy: legacy}), tok)
			mu.Lock()
			sent := queued[tok].Load()
			mu.Unlock()
			if int64(len(got)) != sent {
				t.Fatalf("the server sent %d progress notifications, the client got %d: %v", sent, len(got), got)
			}
		})
	}
}

func testExecProgress(t *testing.T, c *mcpClient, tok string) []float64 {
	var out struct {
		ExitCode *int   `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	res, err := c.callErr(context.Background(), "workspace_exec", map[string]any{"command": "for i in 1 2 3; do echo tick $i; sleep 1; done"}, tok)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatal(resultText(res))
	}
	decodeStructured(t, res, &out)
	if out.ExitCode == nil || *out.ExitCode != 0 || !strings.Contains(out.Stdout, "tick 3") {
		t.Fatalf("exec: %+v", out)
	}
	got := progressValues(t, c.progress(), tok)
	// About one per second over three seconds; timing is not asserted, only
	// that they came and increase.
	if len(got) < 2 {
		t.Fatalf("%d progress notifications during a 3 s command: %v", len(got), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("progress does not increase: %v", got)
		}
	}
	return got
}

func TestCancelledCallKillsProcess(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, legacy := range []bool{true, false} {
		t.Run(map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy], func(t *testing.T) {
			c := e.client(t, clientOptions{legacy: legacy, workspace: fmt.Sprintf("cancel-%v", legacy)})
			var w whoami
			c.ok(t, "test_whoami", nil, &w)
			l, err := e.manager.Acquire(context.Background(), w.Key, w.Named)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			running := func() bool {
				procs, err := l.Client.List(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range procs {
					if strings.Contains(strings.Join(append([]string{p.Cmd}, p.Args...), " "), "sleep 37") {
						return true
					}
				}
				return false
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.callErr(ctx, "workspace_exec", map[string]any{"command": "sleep 37"}, "cancel")
				done <- err
			}()
			waitFor(t, "the command to start", running)
			cancel() // closes the request
			if err := recv(t, done, "the cancelled call to return"); err == nil {
				t.Fatal("cancelled call returned no error")
			}
			waitFor(t, "the process of the cancelled call to die", func() bool { return !running() })
			// The client and the server keep working.
			c.ok(t, "workspace_exec", map[string]any{"command": "true"}, nil)
		})
	}
}

func TestProtocolAndSchemaErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, legacy := range []bool{true, false} {
		t.Run(map[bool]string{true: "2025-11-25", false: "2026-07-28"}[legacy], func(t *testing.T) {
			c := e.client(t, clientOptions{legacy: legacy})
			_, err := c.callErr(context.Background(), "no_such_tool", nil, nil)
			if !errors.Is(err, mcp.ErrInvalidParams) {
				t.Fatalf("unknown tool: %v, want JSON-RPC -32602", err)
			}
			res := c.call(t, "workspace_exec", map[string]any{"command": "true", "timeout_sec": "soon"})
			if !res.IsError || !strings.Contains(resultText(res), "timeout_sec") {
				t.Fatalf("bad argument: isError=%v %s", res.IsError, resultText(res))
			}
			res = c.call(t, "workspace_exec", map[string]any{"command": "true", "bogus": 1})
			if !res.IsError || !strings.Contains(resultText(res), "bogus") {
				t.Fatalf("unknown argument: isError=%v %s", res.IsError, resultText(res))
			}
			res = c.call(t, "test_panic", nil)
			if !res.IsError || strings.Contains(resultText(res), "goroutine") {
				t.Fatalf("panic: isError=%v %s", res.IsError, resultText(res))
			}
			c.ok(t, "workspace_exec", map[string]any{"command": "true"}, nil)
		})
	}
	// On the wire: the JSON-RPC error code of an unknown tool.
	sid := e.rawSession(t, nil)
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`,
		map[string]string{mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"code":-32602`) {
		t.Fatalf("unknown tool on the wire: %d %s", resp.StatusCode, body)
	}
}

func TestMetrics(t *testing.T) {
	tokens := map[string]string{"token-metrics-0123456789": "ops"}
	e := newEnv(t, envOptions{tokens: tokens})
	c := e.client(t, clientOptions{legacy: true, token: "token-metrics-0123456789"})
	c.ok(t, "test_whoami", nil, nil)
	c.ok(t, "test_whoami", nil, nil)
	c.call(t, "test_panic", nil)
	_, _ = c.callErr(context.Background(), "no_such_tool", nil, nil)

	resp, body := e.rawRequest(t, http.MethodGet, "/metrics", "", map[string]string{"Authorization": "Bearer token-metrics-0123456789"})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`sandbox_mcp_tool_calls_total{tool="test_whoami",outcome="ok"} 2`,
		`sandbox_mcp_tool_calls_total{tool="test_panic",outcome="tool_error"} 1`,
		`sandbox_mcp_tool_calls_total{tool="unknown",outcome="protocol_error"} 1`,
		`sandbox_mcp_tool_call_duration_seconds_count{tool="test_whoami"} 2`,
		`sandbox_mcp_tool_call_duration_seconds_bucket{tool="test_whoami",le="+Inf"} 2`,
		`sandbox_mcp_sandboxes{state="running"} 1`,
		`sandbox_mcp_sandbox_creations_total 1`,
		`sandbox_mcp_http_sessions_active 1`,
		`# TYPE sandbox_mcp_tool_call_duration_seconds histogram`,
	} {
		// Whole lines: "} 2" must not match "} 20".
		if !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("/metrics lacks the line %q", want)
		}
	}
	if !strings.Contains(body, "\n"+`sandbox_mcp_http_requests_total{path="/mcp",code="200"} `) {
		t.Errorf("/metrics lacks a count of /mcp requests answered 200")
	}
	if t.Failed() {
		t.Log(body)
	}
}

func TestTLS(t *testing.T) {
	e := newEnv(t, envOptions{tls: true})
	if !strings.HasPrefix(e.base, "https://") {
		t.Fatal(e.base)
	}
	c := e.client(t, clientOptions{legacy: true})
	var w whoami
	c.ok(t, "test_whoami", nil, &w)
	if resp, _ := e.rawRequest(t, http.MethodGet, "/healthz", "", nil); resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("/healthz over TLS: %d tls=%v", resp.StatusCode, resp.TLS != nil)
	}
	// Plain HTTP to the TLS port does not reach MCP.
	plain := strings.Replace(e.base, "https://", "http://", 1)
	resp, err := http.Get(plain + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served on the TLS port")
		}
	}
}
