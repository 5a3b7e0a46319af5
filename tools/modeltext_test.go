package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/mark3labs/mcp-go/mcp"
)

// renderedCase is one result whose text is kept as a golden file.
type renderedCase struct {
	name    string
	notices []string
	render  func(c *Call) *mcp.CallToolResult
}

func ptr[T any](v T) *T { return &v }

// renderedCases are fixed outputs, rendered as the handlers render them.
func renderedCases() []renderedCase {
	ok := func(tool string, out any, schema *schemaCheck, blocks func(int) []mcp.Content) func(c *Call) *mcp.CallToolResult {
		return func(c *Call) *mcp.CallToolResult { c.tool = tool; return c.result(out, blocks, schema) }
	}
	execSchema := compileSchema("workspace_exec", "output", schemaOf[execOutput]())
	readSchema := compileSchema("read_files", "output", schemaOf[readFilesOutput]())
	listSchema := compileSchema("list_files", "output", schemaOf[listFilesOutput]())
	traceback := "Traceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\nZeroDivisionError: division by zero\n"
	read := &readFilesOutput{Files: []readFileEntry{
		{Path: "src/app.py", Content: "if a < b && c > d:\n    print(\"<ok>\")\n", Encoding: "text", Size: 40, Bytes: 40},
		{Path: "logs/big.log", Content: "line 1\nline 2\n", Encoding: "text", Size: 2_600_000, Bytes: 14, Truncated: true, NextOffset: ptr(int64(14)), Note: "showing 2 lines, the default; read on from offset 14 (or give limit or max_lines)"},
		{Path: "missing.txt", Error: "file \"missing.txt\" does not exist in the workspace"},
		{Path: "src/util.py", Content: "def f():\n    return 1\n", shown: "10\tdef f():\n11\t    return 1\n", Encoding: "text", Size: 400, Offset: 120, Bytes: 22, StartLine: 10, Lines: 2, Truncated: true, NextOffset: ptr(int64(142)), NextLine: 12, LineNumbers: true},
	}, Bytes: 76}
	return []renderedCase{
		{name: "exec_stdout", render: ok("workspace_exec", &execOutput{
			RunID: "g1-r3", ExitCode: ptr(0), Stdout: ptr("a < b & c > d\nok\n"), Stderr: ptr(""),
			StdoutTotalBytes: ptr(int64(17)), StderrTotalBytes: ptr(int64(0)), DurationMs: 12, Cwd: "src", TimeoutSec: 60,
			FullOutput: &fullOutput{Stdout: ".sandbox-mcp/runs/g1-r3/stdout.log"},
		}, execSchema, nil)},
		{name: "exec_both_streams", render: ok("workspace_exec", &execOutput{
			RunID: "g1-r4", ExitCode: ptr(1), Stdout: ptr("partial\n"), Stderr: ptr(traceback),
			StdoutTotalBytes: ptr(int64(8)), StderrTotalBytes: ptr(int64(len(traceback))), DurationMs: 1530, Cwd: ".", TimeoutSec: 60,
		}, execSchema, nil)},
		{name: "exec_truncated", notices: []string{truncatedNotice("stdout", 10_485_760, 16384, 16384, ".sandbox-mcp/runs/g1-r5/stdout.log")}, render: ok("workspace_exec", &execOutput{
			RunID: "g1-r5", ExitCode: ptr(0), Stdout: ptr("abc\n" + omissionMarker(10_452_992, "stdout", ".sandbox-mcp/runs/g1-r5/stdout.log") + "xyz\n"), Stderr: ptr(""),
			StdoutTruncated: true, StdoutTotalBytes: ptr(int64(10_485_760)), StderrTotalBytes: ptr(int64(0)), DurationMs: 2400, Cwd: "build", TimeoutSec: 60,
			FullOutput: &fullOutput{Stdout: ".sandbox-mcp/runs/g1-r5/stdout.log"},
		}, execSchema, nil)},
		{name: "exec_timeout", render: ok("workspace_exec", &execOutput{
			RunID: "g1-r6", ExitCode: ptr(137), Signal: "killed", TimedOut: true, Stdout: ptr(""), Stderr: ptr(""),
			StdoutTotalBytes: ptr(int64(0)), StderrTotalBytes: ptr(int64(0)), DurationMs: 5003, Cwd: ".", TimeoutSec: 5,
		}, execSchema, nil)},
		{name: "exec_background", render: ok("workspace_exec", &execOutput{
			RunID: "g1-r7", Process: "g1-p4242", Pid: 4242, DurationMs: 3, Cwd: ".",
			FullOutput: &fullOutput{Output: ".sandbox-mcp/runs/g1-r7/output.log"},
		}, execSchema, nil)},
		{name: "read_files", render: ok("read_files", read, readSchema, func(first int) []mcp.Content { return readFilesContent(read, first) })},
		{name: "list_files", notices: []string{"list_files shows entries 1-5 of 9 (max_entries 5); continue with offset 5, or narrow the listing with path, depth or glob."}, render: ok("list_files", &listFilesOutput{
			Path: ".", Total: 9, Truncated: true, NextOffset: 5, Entries: []fileEntry{
				{Path: "src", Type: "dir", Size: 4096, Mode: "0755", Modified: "2026-12-01T12:00:00Z"},
				{Path: "src/app.py", Type: "file", Size: 1234, Mode: "0644", Modified: "2026-12-01T12:00:00Z"},
				{Path: "src/run.sh", Type: "file", Size: 80, Mode: "0755", Modified: "2026-12-01T12:00:00Z"},
				{Path: "latest", Type: "symlink", Size: 3, Mode: "0777", Modified: "2026-12-01T12:00:00Z", SymlinkTarget: "src"},
				{Path: "data.bin", Type: "file", Size: 10_485_760, Mode: "0644", Modified: "2026-12-01T12:00:00Z"},
			}}, listSchema, nil)},
		{name: "error_input", render: func(c *Call) *mcp.CallToolResult {
			return c.errorResult(inputErr("cwd", "directory %q does not exist in the workspace", "nope"))
		}},
		{name: "error_not_found", notices: []string{"The sandbox was resumed after an idle pause."}, render: func(c *Call) *mcp.CallToolResult {
			c.tool = "read_files"
			return c.errorResult(connect.NewError(connect.CodeNotFound, errors.New(`file "a<b>.txt" does not exist in the workspace`)))
		}},
	}
}

// renderedText is a result's text blocks as a golden file holds them.
func renderedText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for i, c := range res.Content {
		if i > 0 {
			b.WriteString("\n\n[content block " + strconv.Itoa(i) + "]\n")
		}
		if tc, ok := mcp.AsTextContent(c); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		b.WriteString("\n\n[isError]")
	}
	return b.String() + "\n"
}

// TestRenderedText compares the text the model reads of fixed results with
// testdata/rendered; UPDATE_RENDERED=true rewrites the files.
func TestRenderedText(t *testing.T) {
	update := os.Getenv("UPDATE_RENDERED") == "true"
	d := &Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, rc := range renderedCases() {
		t.Run(rc.name, func(t *testing.T) {
			c := &Call{ctx: context.Background(), d: d, notices: rc.notices}
			res := rc.render(c)
			got := renderedText(res)
			if !res.IsError && strings.Contains(got, "internal error") {
				t.Fatalf("rendering failed: %s", got)
			}
			if _, ok := res.StructuredContent.(json.RawMessage); !ok && !res.IsError {
				t.Fatalf("structuredContent is %T", res.StructuredContent)
			}
			for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
				if raw, ok := res.StructuredContent.(json.RawMessage); ok && strings.Contains(string(raw), esc) {
					t.Errorf("structuredContent escapes HTML: %s", raw)
				}
			}
			file := filepath.Join("..", "testdata", "rendered", rc.name+".txt")
			if update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("no golden file (%v); run UPDATE_RENDERED=true go test ./tools/ -run TestRenderedText", err)
			}
			if got != string(want) {
				t.Errorf("%s changed; run UPDATE_RENDERED=true go test ./tools/ -run TestRenderedText and review the diff\ngot:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}
