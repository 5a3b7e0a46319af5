//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"

	"github.com/sandbox-mcp/sandbox-mcp/envd/search"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// searchResult is the part of search_files' structuredContent these tests
// read.
type searchResult struct {
	Matches []struct {
		Path   string   `json:"path"`
		Line   int64    `json:"line"`
		Text   string   `json:"text"`
		Before []string `json:"before"`
	} `json:"matches"`
	MatchCount    int64 `json:"match_count"`
	FilesScanned  int64 `json:"files_scanned"`
	BinarySkipped int64 `json:"binary_skipped"`
}

// checkSearchFiles writes a small tree through put_files, searches it with
// search_files and checks what comes back. It returns whether the search
// helper was uploaded into the workspace (.sandbox-mcp/bin) rather than
// run from the sandbox's own envd.
func checkSearchFiles(t *testing.T, c *mcpclient.Client) (uploaded bool) {
	t.Helper()
	ctx := t.Context()
	res := callTool(t, ctx, c, "put_files", map[string]any{"files": []any{
		map[string]any{"path": "src/a.go", "content": "package a\n\n// TODO: one <b> & c\nfunc A() {}\n"},
		map[string]any{"path": "src/b.py", "content": "# todo two\n"},
		map[string]any{"path": "vendor/v.go", "content": "// TODO vendored\n"},
		map[string]any{"path": ".git/HEAD", "content": "TODO\n"},
	}})
	if res.IsError {
		t.Fatalf("put_files: %s", textOf(res))
	}
	res = callTool(t, ctx, c, "search_files", map[string]any{"pattern": "todo", "case_insensitive": true, "exclude": []string{"vendor"}, "context_lines": 1})
	if res.IsError {
		t.Fatalf("search_files: %s", textOf(res))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out searchResult
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.MatchCount != 2 || len(out.Matches) != 2 || out.Matches[0].Path != "src/a.go" || out.Matches[0].Line != 3 ||
		out.Matches[0].Text != "// TODO: one <b> & c" || len(out.Matches[0].Before) != 1 || out.Matches[1].Path != "src/b.py" {
		t.Fatalf("search_files: %s", raw)
	}
	res = callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "ls .sandbox-mcp/bin 2>/dev/null | wc -l"})
	raw, _ = json.Marshal(res.StructuredContent)
	var ls struct {
		Stdout string `json:"stdout"`
	}
	if err := json.Unmarshal(raw, &ls); err != nil || res.IsError {
		t.Fatalf("workspace_exec: %s", raw)
	}
	return strings.TrimSpace(ls.Stdout) != "0"
}

// isolationOf returns workspace_info's isolation.
func isolationOf(t *testing.T, c *mcpclient.Client) string {
	t.Helper()
	res := callTool(t, t.Context(), c, "workspace_info", map[string]any{})
	raw, _ := json.Marshal(res.StructuredContent)
	var info struct {
		Isolation string `json:"isolation"`
	}
	if err := json.Unmarshal(raw, &info); err != nil || res.IsError {
		t.Fatalf("workspace_info: %s", raw)
	}
	return info.Isolation
}

// TestSearchFilesBwrap: in a bwrap sandbox search_files runs the envd bound
// at /.sandbox-mcp/envd, and uploads nothing.
func TestSearchFilesBwrap(t *testing.T) {
	c := stdioClient(t, "--isolation", "bwrap")
	res := callTool(t, t.Context(), c, "workspace_info", map[string]any{})
	if res.IsError {
		if text := textOf(res); strings.Contains(text, "bwrap") || strings.Contains(text, "bubblewrap") {
			testenv.Missing(t, "a working bwrap sandbox (%s): install bubblewrap; sandbox-mcp doctor names the fix", text)
		}
		t.Fatalf("workspace_info: %s", textOf(res))
	}
	if iso := isolationOf(t, c); iso != "bwrap" {
		testenv.Missing(t, "a bwrap sandbox (this one is isolated by %q): install bubblewrap", iso)
	}
	if checkSearchFiles(t, c) {
		t.Error("search_files uploaded its helper into a bwrap sandbox, which has its envd at /.sandbox-mcp/envd")
	}
}

// TestSearchFilesNoIsolation: a sandbox without isolation has no
// /.sandbox-mcp/envd, so search_files uploads the embedded lean envd into
// the workspace once and runs it from there.
func TestSearchFilesNoIsolation(t *testing.T) {
	if _, err := os.Stat("/.sandbox-mcp/envd"); err == nil {
		t.Skip("this host has a /.sandbox-mcp/envd of its own")
	}
	c := stdioClient(t, "--isolation", "none")
	if iso := isolationOf(t, c); iso != "none" {
		t.Fatalf("isolation %q, want none", iso)
	}
	if !checkSearchFiles(t, c) {
		t.Error("search_files ran without isolation, yet .sandbox-mcp/bin holds no uploaded helper")
	}
}

// TestEnvdSearchCommand: `sandbox-mcp envd search` is the search mode of
// the lean envd, so a sandbox whose envd is this binary needs no upload.
func TestEnvdSearchCommand(t *testing.T) {
	n := newNewcomer(t)
	root := filepath.Join(n.dir, "tree")
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d", "f.txt"), []byte("one\nneedle two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := n.mustRun("./sandbox-mcp envd search --root " + root + " --pattern 'needle \\w+'")
	var recs []search.Record
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r search.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%v in %q", err, out)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 || recs[0].Type != "start" || recs[0].Version != search.ProtocolVersion ||
		recs[1].Type != "match" || recs[1].Path != "d/f.txt" || recs[1].Line != 2 || recs[1].Text != "needle two" ||
		recs[2].Type != "done" || recs[2].Summary == nil || recs[2].Summary.Matches != 1 {
		t.Fatalf("records: %s", out)
	}
	if _, errs, code := n.run("./sandbox-mcp envd search --pattern x", nil); code != 2 || !strings.Contains(errs, "--root") {
		t.Errorf("without --root: exit %d, stderr %q", code, errs)
	}
	// The daemon's own command line is unchanged.
	if _, errs, code := n.run("./sandbox-mcp envd other", nil); code != 1 || !strings.Contains(errs, "unexpected arguments") {
		t.Errorf("envd other: exit %d, stderr %q", code, errs)
	}
}
