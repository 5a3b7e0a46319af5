//go:build linux

package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore/redistest"
)

// TestRedisStoreAcrossProcesses: two processes with --store on one Redis
// share a named workspace (the second finds the first's sandbox through
// the store, not the state directory's file), under --redis-key-prefix.
func TestRedisStoreAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	n := newNewcomer(t)
	n.env = append(n.env, "SANDBOX_MCP_STORE="+srv.URL(), "SANDBOX_MCP_REDIS_KEY_PREFIX=e2e:")
	n.mustRun(`./sandbox-mcp call --workspace shared workspace_exec '{"command": "echo kept > f.txt"}'`)
	if out := n.mustRun(`./sandbox-mcp call --workspace shared read_files '{"paths": ["f.txt"]}'`); !strings.Contains(out, "kept") {
		t.Fatalf("the second process did not find the first one's sandbox: %q", out)
	}
	o, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	defer c.Close()
	raw, err := c.Get(t.Context(), "e2e:ws:stdio:shared").Result()
	if err != nil || !strings.Contains(raw, `"state":"paused"`) {
		t.Fatalf("record under the prefix = %q, %v; want the named workspace, paused at the end of its session", raw, err)
	}
}

func TestRedisStoreFlagErrors(t *testing.T) {
	n := newNewcomer(t)
	out, errs, code := n.run(`./sandbox-mcp call --store http://user:s3cret@h/0 workspace_info`, nil)
	if code == 0 || !strings.Contains(errs, "--store") || strings.Contains(out+errs, "s3cret") {
		t.Errorf("--store http://…: exit %d, stderr %q; want a --store error without the password", code, errs)
	}
	_, errs, code = n.run(`./sandbox-mcp call --store unix:///nonexistent/redis.sock workspace_info`, nil)
	if code == 0 || !strings.Contains(errs, "redis store at unix:/nonexistent/redis.sock unreachable") {
		t.Errorf("--store on a missing redis: exit %d, stderr %q; want the unreachable error", code, errs)
	}
}

// TestRedisDownOnToolCall: a server whose Redis stops answering returns the
// clear error on the tool call (bounded, no hang) and, once Redis is back,
// works (the same workspace, no second sandbox).
func TestRedisDownOnToolCall(t *testing.T) {
	srv := redistest.Start(t)
	c := stdioClient(t, "--store", srv.URL(), "--workspace", "w")
	ctx := t.Context()
	srv.Freeze()
	res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo one > f.txt"})
	want := "redis store at unix:" + srv.Socket() + " unreachable"
	t.Logf("the model read: %s", textOf(res))
	if !res.IsError || !strings.Contains(textOf(res), want) {
		t.Fatalf("workspace_exec with redis frozen: isError %v, %q; want %q", res.IsError, textOf(res), want)
	}
	srv.Thaw()
	if res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo two > f.txt"}); res.IsError {
		t.Fatalf("after redis came back: %s", textOf(res))
	}
	res = callTool(t, ctx, c, "workspace_info", nil)
	info, _ := res.StructuredContent.(map[string]any)
	if res.IsError || info["generation"] != float64(1) {
		t.Fatalf("workspace_info after the outage: %s; want generation 1 (one sandbox)", textOf(res))
	}
}
