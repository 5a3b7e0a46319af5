//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
)

// structuredOf decodes a tool result's structuredContent into out.
func structuredOf(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
}

// TestServeE2BOverManageServe: the real binaries end to end. An MCP client
// drives `serve --provider e2b` over stdio, whose sandboxes are made by a
// `manage serve` process and reached through its envd proxy, all plain
// http on loopback. When the sandbox is deleted through the management API
// behind the server's back, the next call says a new sandbox was made and
// that it was NOT run, and indeed it did not run in the new one.
func TestServeE2BOverManageServe(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	c := stdioClient(t, api.ServeFlags()...)
	ctx := t.Context()
	ok := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res := callTool(t, ctx, c, name, args)
		if res.IsError {
			t.Fatalf("%s(%v): %s", name, args, textOf(res))
		}
		return res
	}

	var exec struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	structuredOf(t, ok("workspace_exec", map[string]any{"command": "echo hello; pwd"}), &exec)
	if exec.ExitCode != 0 || exec.Stdout != "hello\n"+manageServeWorkdir+"\n" {
		t.Fatalf("workspace_exec: %+v", exec)
	}
	ok("put_files", map[string]any{"files": []any{map[string]any{"path": "src/a.txt", "content": "alpha\n"}}})
	if res := ok("read_files", map[string]any{"paths": []any{"src/a.txt"}}); len(res.Content) != 2 || textOf(res) == "" ||
		res.Content[1].(mcp.TextContent).Text != "alpha\n" {
		t.Fatalf("read_files: %s", textOf(res))
	}
	var info struct {
		Provider   string `json:"provider"`
		SandboxID  string `json:"sandbox_id"`
		Generation int64  `json:"generation"`
		Workdir    string `json:"workdir"`
	}
	structuredOf(t, ok("workspace_info", map[string]any{}), &info)
	if info.Provider != "e2b" || info.Generation != 1 || info.Workdir != manageServeWorkdir || info.SandboxID == "" {
		t.Fatalf("workspace_info: %+v", info)
	}

	// Deleted behind the server's back.
	if existed, err := api.Client(t).Kill(ctx, info.SandboxID); err != nil || !existed {
		t.Fatalf("DELETE /sandboxes/%s: %v, %v", info.SandboxID, existed, err)
	}
	lost := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo ran >> count"})
	text := textOf(lost)
	for _, want := range []string{"NOTICE: The sandbox was recreated (generation 1 → 2)", "not found", "This command was NOT run"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the call after the DELETE (isError=%v) does not say %q:\n%s", lost.IsError, want, text)
		}
	}
	structuredOf(t, ok("workspace_exec", map[string]any{"command": "test ! -e count && test ! -e src && echo clean"}), &exec)
	if exec.Stdout != "clean\n" {
		t.Fatalf("in the new sandbox: %+v; want no trace of the old files or of the call that was not run", exec)
	}
	var now struct {
		SandboxID  string `json:"sandbox_id"`
		Generation int64  `json:"generation"`
	}
	structuredOf(t, ok("workspace_info", map[string]any{}), &now)
	if now.Generation != 2 || now.SandboxID == info.SandboxID {
		t.Fatalf("after the loss: %+v; want generation 2 on a new sandbox", now)
	}
	if _, err := api.Client(t).Get(ctx, now.SandboxID); err != nil {
		t.Fatalf("the new sandbox is not manage serve's: %v", err)
	}
}

// TestServeE2BDamagedStateDB: a named e2b workspace's state.db damaged
// between two `call`s, against a real `manage serve`; the next call used
// to get a new empty sandbox (the old one left paused in E2B). Now it
// reaches the same sandbox, with its file, and says once that the store
// was rebuilt and the sandbox recovered.
func TestServeE2BDamagedStateDB(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	n := newNewcomer(t)
	call := "./sandbox-mcp call " + strings.Join(api.ServeFlags(), " ") + " --workspace e2bdamaged "
	n.mustRun(call + `put_files '{"files": [{"path": "kept.txt", "content": "still here"}]}'`)
	before, err := api.Client(t).List(t.Context(), e2b.ListOptions{})
	if err != nil || len(before) != 1 {
		t.Fatalf("sandboxes before the damage: %+v, %v; want one", before, err)
	}
	db := filepath.Join(n.dir, "state", "state.db")
	if err := os.Truncate(db, 8192); err != nil {
		t.Fatal(err)
	}
	out, errs, code := n.run(call+`read_files '{"paths": ["kept.txt"]}'`, nil)
	if code != 0 {
		t.Fatalf("first call after the damage: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if !strings.Contains(out, "still here") || strings.Count(out, "NOTICE: "+rebuiltNotice) != 1 {
		t.Errorf("first call after the damage: want the file and the rebuild notice once:\n%s\nstderr: %s", out, errs)
	}
	after, err := api.Client(t).List(t.Context(), e2b.ListOptions{})
	if err != nil || len(after) != 1 || after[0].SandboxID != before[0].SandboxID {
		t.Errorf("sandboxes after the rebuild: %+v, %v; want only %s", after, err, before[0].SandboxID)
	}
	out = n.mustRun(call + `read_files '{"paths": ["kept.txt"]}'`)
	if !strings.Contains(out, "still here") || strings.Contains(out, "damaged") {
		t.Errorf("second call: want the file and no notice:\n%s", out)
	}
}
