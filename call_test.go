//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCall(t *testing.T) {
	n := newNewcomer(t)
	out := n.mustRun(`./sandbox-mcp call workspace_exec '{"command": "echo hello; exit 3"}'`)
	if !strings.HasPrefix(out, "exit 3 · ") || !strings.HasSuffix(out, "\nhello\n") {
		t.Fatalf("call output %q: want the rendered text", out)
	}
	out = n.mustRun(`./sandbox-mcp call --result-format json workspace_exec '{"command": "echo hello; exit 3"}'`)
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil || res.ExitCode != 3 || res.Stdout != "hello\n" {
		t.Fatalf("call output %q: %+v %v", out, res, err)
	}
	// An isError result exits 1 and prints the message; it is not about the
	// arguments, so no input schema follows.
	out, errs, code := n.run(`./sandbox-mcp call read_files '{"paths": ["missing.txt"]}'`, nil)
	if code != 1 || !strings.Contains(out, "missing.txt") {
		t.Fatalf("isError call: exit %d, output %q", code, out)
	}
	if strings.Contains(errs, "input schema") {
		t.Errorf("isError call that is not about the arguments printed the input schema: %q", errs)
	}
	// --json prints the whole result.
	out = n.mustRun(`./sandbox-mcp call --json workspace_info`)
	var whole struct {
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	}
	if err := json.Unmarshal([]byte(out), &whole); err != nil || whole.StructuredContent["provider"] != "local" {
		t.Fatalf("--json output %q: %v", out, err)
	}
	// Arguments from a file and from stdin.
	if err := os.WriteFile(filepath.Join(n.dir, "args.json"), []byte(`{"command":"echo from-file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := n.mustRun(`./sandbox-mcp call workspace_exec @args.json`); !strings.Contains(out, "from-file") {
		t.Errorf("@file: %q", out)
	}
	if out, _, code := n.run(`./sandbox-mcp call workspace_exec -`, strings.NewReader(`{"command":"echo from-stdin"}`)); code != 0 || !strings.Contains(out, "from-stdin") {
		t.Errorf("stdin args: exit %d %q", code, out)
	}
}

// TestCallBadInput: a call to fix exits 2 and says what to fix; arguments
// the tool rejects, by its schema or its own checks, come with the input
// schema.
func TestCallBadInput(t *testing.T) {
	n := newNewcomer(t)
	cases := []struct {
		line string
		want []string
	}{
		{`./sandbox-mcp call workspace_exec '{"command": '`, []string{"JSON", `"command"`}},
		{`./sandbox-mcp call no_such_tool`, []string{"unknown tool", "workspace_exec"}},
		{`./sandbox-mcp call workspace_exec '{}'`, []string{"command", "input schema"}},
		{`./sandbox-mcp call put_files '{"files": [{"path": "a", "content": "!!", "encoding": "base64"}]}'`, []string{"files[0].content", "input schema"}},
		{`./sandbox-mcp call`, []string{"usage"}},
	}
	for _, tc := range cases {
		out, errs, code := n.run(tc.line, nil)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s%s", tc.line, code, out, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(out+errs, w) {
				t.Errorf("%s: output lacks %q:\n%s%s", tc.line, w, out, errs)
			}
		}
	}
}

func TestCallSequenceInNamedWorkspace(t *testing.T) {
	n := newNewcomer(t)
	n.mustRun(`./sandbox-mcp call --workspace demo put_files '{"files": [{"path": "hello.py", "content": "print(\"hello from the sandbox\")"}]}'`)
	out := n.mustRun(`./sandbox-mcp call --workspace demo workspace_exec '{"command": "cat hello.py"}'`)
	if !strings.Contains(out, `print("hello from the sandbox")`) || !strings.Contains(out, "was resumed") {
		t.Fatalf("second call of the sequence: %q", out)
	}
	// Another workspace does not see the file.
	out, _, _ = n.run(`./sandbox-mcp call --workspace other workspace_exec '{"command": "ls hello.py"}'`, nil)
	if !strings.HasPrefix(out, "exit 2 · ") {
		t.Fatalf("another workspace saw the file: %q", out)
	}
}
