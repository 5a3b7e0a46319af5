//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// stdioClient starts the built binary's serve command and connects the
// mcp-go stdio client to it.
func stdioClient(t testing.TB, extra ...string) *mcpclient.Client {
	t.Helper()
	bin := envdtest.Binary(t)
	state := filepath.Join(envdtest.ShortTempDir(t), "state")
	// Named workspaces' sandboxes outlive the server.
	t.Cleanup(func() { killSandboxes(t, state) })
	args := append([]string{"serve", "--state-dir", state, "--log-level", "warn"}, extra...)
	c, err := mcpclient.NewStdioMCPClient(bin, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	initialize(t, context.Background(), c)
	return c
}

// TestStdioBinaryTools drives every tool's main path and a main error path
// through the built binary over stdio with the mcp-go client.
func TestStdioBinaryTools(t *testing.T) {
	exerciseTools(t, stdioClient(t))
}

// TestHTTPBinaryTools does the same over streamable HTTP, with a client of
// revision 2025-11-25 (a session) and one of 2026-07-28 (stateless, picking
// its workspace with the Sandbox-Workspace header).
func TestHTTPBinaryTools(t *testing.T) {
	n := newNewcomer(t)
	runLongRunning(t, n, "./sandbox-mcp serve --http 127.0.0.1:0", func(url string) {
		auth := "Bearer " + n.httpToken()
		for _, tc := range []struct {
			name string
			opts []mcpclient.ClientOption
			hdr  map[string]string
		}{
			{"2025-11-25", []mcpclient.ClientOption{mcpclient.WithProtocolVersion(mcp.ProtocolVersion20251125)}, map[string]string{"Authorization": auth}},
			{"2026-07-28", nil, map[string]string{"Sandbox-Workspace": "stateless-test", "Authorization": auth}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(tc.hdr))
				if err != nil {
					t.Fatal(err)
				}
				c := mcpclient.NewClient(tr, tc.opts...)
				t.Cleanup(func() { c.Close() })
				if err := c.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				init := mcp.InitializeRequest{}
				init.Params.ClientInfo = mcp.Implementation{Name: "http-test", Version: "0"}
				if tc.name == "2025-11-25" {
					init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
				}
				res, err := c.Initialize(t.Context(), init)
				if err != nil {
					t.Fatal(err)
				}
				if res.ProtocolVersion != tc.name {
					t.Fatalf("negotiated %s, want %s", res.ProtocolVersion, tc.name)
				}
				exerciseTools(t, c)
			})
		}
	})
}

// exerciseTools calls every tool's main path and a main error path.
func exerciseTools(t *testing.T, c *mcpclient.Client) {
	t.Helper()
	ctx := t.Context()
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil || len(list.Tools) != 14 {
		t.Fatalf("ListTools: %d tools, %v", len(list.Tools), err)
	}
	structured := func(res *mcp.CallToolResult) map[string]any {
		t.Helper()
		raw, _ := json.Marshal(res.StructuredContent)
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("structuredContent %s: %v", raw, err)
		}
		return m
	}
	ok := func(name string, args map[string]any) map[string]any {
		t.Helper()
		res := callTool(t, ctx, c, name, args)
		if res.IsError {
			t.Fatalf("%s(%v): %s", name, args, textOf(res))
		}
		return structured(res)
	}
	fail := func(name string, args map[string]any, want string) {
		t.Helper()
		res := callTool(t, ctx, c, name, args)
		if !res.IsError || !strings.Contains(textOf(res), want) {
			t.Fatalf("%s(%v): isError=%v %q; want an error mentioning %q", name, args, res.IsError, textOf(res), want)
		}
	}
	ok("put_files", map[string]any{"files": []any{map[string]any{"path": "src/a.txt", "content": "alpha\n"}}})
	fail("put_files", map[string]any{"files": []any{map[string]any{"path": "../escape", "content": "x"}}}, "leaves the workspace")
	// The file's text comes in a content block of its own, which the entry
	// names.
	if res := callTool(t, ctx, c, "read_files", map[string]any{"paths": []any{"src/a.txt"}}); res.IsError || len(res.Content) != 2 ||
		!strings.Contains(fmt.Sprint(structured(res)["files"]), "content_index:1") || res.Content[1].(mcp.TextContent).Text != "alpha\n" {
		t.Fatalf("read_files: %s", textOf(res))
	}
	fail("read_files", map[string]any{"paths": []any{"/etc/passwd"}}, "outside the workspace")
	if got := ok("list_files", map[string]any{"path": "src"}); !strings.Contains(fmt.Sprint(got["entries"]), "a.txt") {
		t.Fatalf("list_files: %v", got)
	}
	fail("list_files", map[string]any{"path": "nope"}, "nope")
	if got := ok("workspace_exec", map[string]any{"command": "cat src/a.txt; exit 4"}); got["exit_code"] != float64(4) || got["stdout"] != "alpha\n" {
		t.Fatalf("workspace_exec: %v", got)
	}
	fail("workspace_exec", map[string]any{"command": "true", "cwd": "missing-dir"}, "missing-dir")
	bg := ok("workspace_exec", map[string]any{"command": "read x; echo got $x", "background": true})
	proc, _ := bg["process"].(string)
	if proc == "" {
		t.Fatalf("background start: %v", bg)
	}
	if got := ok("process_list", map[string]any{}); !strings.Contains(fmt.Sprint(got["processes"]), proc) {
		t.Fatalf("process_list: %v", got)
	}
	ok("process_input", map[string]any{"process": proc, "data": "hi\n", "close": true})
	out := ok("process_output", map[string]any{"process": proc, "wait_sec": 30})
	for out["status"] == "running" {
		out = ok("process_output", map[string]any{"process": proc, "wait_sec": 30})
	}
	if !strings.Contains(fmt.Sprint(out["output"]), "got hi") {
		t.Fatalf("process_output: %v", out)
	}
	ok("process_signal", map[string]any{"process": proc})
	fail("process_output", map[string]any{"process": "g1-p999999"}, "999999")
	fail("process_signal", map[string]any{"process": "not-a-handle"}, "not-a-handle")
	fail("process_input", map[string]any{"process": "g1-p999999", "data": "x"}, "999999")
	fail("stage_inputs", map[string]any{"inputs": []any{map[string]any{"from": "host://nope/x"}}}, "nope")
	ok("stage_inputs", map[string]any{"inputs": []any{map[string]any{"from": "workspace://src/a.txt", "to": "copy.txt"}}})
	if got := ok("collect_outputs", map[string]any{"globs": []any{"src/*.txt"}}); !strings.Contains(fmt.Sprint(got["artifacts"]), "artifact://") {
		t.Fatalf("collect_outputs: %v", got)
	}
	fail("collect_outputs", map[string]any{"globs": []any{"../x"}}, "../x")
	info := ok("workspace_info", map[string]any{})
	fail("workspace_reset", map[string]any{"confirm": false}, "confirm")
	reset := ok("workspace_reset", map[string]any{"confirm": true})
	if reset["generation"].(float64) != info["generation"].(float64)+1 {
		t.Fatalf("reset: %v after %v", reset, info)
	}
	// Unknown tool: a JSON-RPC error, and the server keeps serving.
	req := mcp.CallToolRequest{}
	req.Params.Name = "no_such_tool"
	if _, err := c.CallTool(ctx, req); err == nil {
		t.Fatal("unknown tool did not give a JSON-RPC error")
	}
	ok("workspace_info", map[string]any{})
}

// TestStdioProgress: a client that sent a progress token receives
// progress during a 3 s command.
func TestStdioProgress(t *testing.T) {
	c := stdioClient(t)
	var mu sync.Mutex
	var progress []mcp.JSONRPCNotification
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationProgress) {
			mu.Lock()
			progress = append(progress, n)
			mu.Unlock()
		}
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = "workspace_exec"
	req.Params.Arguments = map[string]any{"command": "sleep 3; echo done"}
	req.Params.Meta = &mcp.Meta{ProgressToken: "p1"}
	res, err := c.CallTool(t.Context(), req)
	if err != nil || res.IsError {
		t.Fatalf("%v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) < 2 {
		t.Fatalf("%d progress notifications during a 3 s command; want about one a second", len(progress))
	}
	var last float64
	for _, n := range progress {
		p, _ := n.Params.AdditionalFields["progress"].(float64)
		if p <= last {
			t.Fatalf("progress did not increase: %v", progress)
		}
		last = p
	}
}

// TestServeReadyFDNotOpen: a --ready-fd that is not open is an error that
// names it, as for envd, not a server nobody hears is ready.
func TestServeReadyFDNotOpen(t *testing.T) {
	n := newNewcomer(t)
	for _, cmd := range []string{"serve --http 127.0.0.1:0", "envd --listen 127.0.0.1:0 --root ."} {
		_, errs, code := n.run("./sandbox-mcp "+cmd+" --ready-fd 9 9>&-", nil)
		if code == 0 || !strings.Contains(errs, "--ready-fd") {
			t.Errorf("%s with a closed --ready-fd: exit %d, stderr %q", cmd, code, errs)
		}
	}
}

// BenchmarkStdioBinaryExecTrue is workspace_exec of `true` through the
// built binary over stdio, local bwrap sandbox.
func BenchmarkStdioBinaryExecTrue(b *testing.B) {
	benchExecTrue(b, stdioClient(b))
}

// benchExecTrue measures workspace_exec of `true` through c, after one
// warm-up call that starts the sandbox, and reports the percentiles.
func benchExecTrue(b *testing.B, c *mcpclient.Client) {
	b.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = "workspace_exec"
	req.Params.Arguments = map[string]any{"argv": []any{"true"}}
	if _, err := c.CallTool(b.Context(), req); err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		res, err := c.CallTool(b.Context(), req)
		if err != nil || res.IsError {
			b.Fatal(res, err)
		}
		ds = append(ds, time.Since(t0))
	}
	envdtest.ReportPercentiles(b, ds)
}

// BenchmarkServerRSS reports the server process's peak RSS after a command
// that writes 64 MiB and one that writes 256 MiB of stdout, next to its
// peak RSS after `true`: the server's memory does not grow with output
// size.
func BenchmarkServerRSS(b *testing.B) {
	for _, tc := range []struct {
		name, command string
	}{{"true", "true"}, {"64MiB", "head -c 67108864 /dev/zero"}, {"256MiB", "head -c 268435456 /dev/zero"}} {
		b.Run(tc.name, func(b *testing.B) {
			var peak int64
			for b.Loop() {
				bin := envdtest.Binary(b)
				state := filepath.Join(envdtest.ShortTempDir(b), "state")
				cmd := exec.Command(bin, "serve", "--state-dir", state, "--log-level", "warn")
				stdin, _ := cmd.StdinPipe()
				stdout, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				r := bufio.NewReader(stdout)
				send := func(msg string) string {
					fmt.Fprintln(stdin, msg)
					line, err := r.ReadString('\n')
					if err != nil {
						b.Fatal(err)
					}
					return line
				}
				send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}`)
				fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				args, _ := json.Marshal(map[string]any{"command": tc.command})
				if line := send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"workspace_exec","arguments":` + string(args) + `}}`); !strings.Contains(line, `exit_code`) {
					b.Fatalf("call: %s", line)
				}
				rss, err := envdtest.PeakRSS(cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, rss)
				stdin.Close()
				_ = cmd.Wait()
			}
			b.ReportMetric(float64(peak)/(1<<20), "server-peak-MiB")
		})
	}
}
