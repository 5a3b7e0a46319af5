//go:build linux

package tools

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// harness is a real MCP server with the tools registered, backed by a
// Manager over managetest sandboxes (real envd daemons in-process), and an
// in-process mcp-go client pinned to protocol 2025-11-25.
type harness struct {
	t        testing.TB
	provider *managetest.Provider
	manager  *manage.Manager
	deps     *Deps
	server   *server.MCPServer
	client   *client.Client
	ws       Workspace

	mu            sync.Mutex
	notifications []mcp.JSONRPCNotification
}

// harnessOptions tweak newHarness.
type harnessOptions struct {
	config       Config
	autoRecreate *bool
	workspace    Workspace
}

func newHarness(t testing.TB, opts harnessOptions) *harness {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := managetest.New(t)
	auto := true
	if opts.autoRecreate != nil {
		auto = *opts.autoRecreate
	}
	m, err := manage.New(manage.Options{Provider: p, AutoRecreate: auto, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	ws := opts.workspace
	if ws.Key == "" {
		ws = Workspace{Key: "test:" + t.Name()}
	}
	d, s, c := newToolServer(t, m, opts.config, ws)
	h := &harness{t: t, provider: p, manager: m, deps: d, server: s, client: c, ws: ws}
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		h.mu.Lock()
		h.notifications = append(h.notifications, n)
		h.mu.Unlock()
	})
	return h
}

// call invokes a tool and returns its result; a JSON-RPC error fails the test.
func (h *harness) call(name string, args any) *mcp.CallToolResult {
	h.t.Helper()
	res, err := h.callErr(context.Background(), name, args, nil)
	if err != nil {
		h.t.Fatalf("%s: JSON-RPC error: %v", name, err)
	}
	return res
}

// callErr invokes a tool with an optional progress token.
func (h *harness) callErr(ctx context.Context, name string, args any, progressToken any) (*mcp.CallToolResult, error) {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	if progressToken != nil {
		req.Params.Meta = &mcp.Meta{ProgressToken: progressToken}
	}
	return h.client.CallTool(ctx, req)
}

// ok calls a tool that must succeed and decodes its structured content.
func (h *harness) ok(name string, args any, out any) *mcp.CallToolResult {
	h.t.Helper()
	res := h.call(name, args)
	if res.IsError {
		h.t.Fatalf("%s(%v) failed: %s", name, args, resultText(res))
	}
	decodeStructured(h.t, res, out)
	return res
}

// fail calls a tool that must return isError and returns its text.
func (h *harness) fail(name string, args any) string {
	h.t.Helper()
	res := h.call(name, args)
	if !res.IsError {
		h.t.Fatalf("%s(%v) succeeded, want isError: %s", name, args, resultText(res))
	}
	return resultText(res)
}

// lease returns a lease on the harness workspace (for direct sandbox access).
func (h *harness) lease() *manage.Lease {
	h.t.Helper()
	l, err := h.manager.Acquire(context.Background(), h.ws.Key, h.ws.Named)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(l.Release)
	return l
}

// progress returns the progress notifications received so far.
func (h *harness) progress() []mcp.JSONRPCNotification {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []mcp.JSONRPCNotification
	for _, n := range h.notifications {
		if n.Method == string(mcp.MethodNotificationProgress) {
			out = append(out, n)
		}
	}
	return out
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func decodeStructured(t testing.TB, res *mcp.CallToolResult, out any) {
	t.Helper()
	if out == nil {
		return
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	if f, ok := out.(interface{ fillContent(*mcp.CallToolResult) }); ok {
		f.fillContent(res)
	}
}

// waitFor polls cond until it holds or the deadline passes. It is for
// waiting on another process's progress (output appearing), never a
// substitute for a synchronisation the test controls.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newToolServer builds a real MCP server with every tool over m, bound to
// workspace ws, and an in-process client: newHarness builds on it, and the
// process tests use it for a "restarted server" over the same sandboxes.
func newToolServer(tb testing.TB, m *manage.Manager, cfg Config, ws Workspace) (*Deps, *server.MCPServer, *client.Client) {
	tb.Helper()
	d := NewDeps(m, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tools, err := Selected(d)
	if err != nil {
		tb.Fatal(err)
	}
	s := server.NewMCPServer("sandbox-mcp-test", "0",
		server.WithToolCapabilities(false),
		server.WithOutputSchemaValidation(),
		server.WithRecovery(),
		server.WithToolHandlerMiddleware(func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
			return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return next(WithWorkspace(ctx, ws), req)
			}
		}),
	)
	Register(s, tools)
	c, err := client.NewInProcessClientWithOptions(s, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return d, s, c
}
