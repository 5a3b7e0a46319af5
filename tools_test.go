//go:build linux

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

func TestToolsJSON(t *testing.T) {
	n := newNewcomer(t)
	var descs []tools.Description
	if err := json.Unmarshal([]byte(n.mustRun("./sandbox-mcp tools --json")), &descs); err != nil {
		t.Fatal(err)
	}
	if len(descs) != 14 {
		t.Fatalf("%d tools, want 14", len(descs))
	}
	for _, d := range descs {
		if d.Name == "" || d.Title == "" || d.Toolset == "" || d.Description == "" || len(d.InputSchema) == 0 || len(d.OutputSchema) == 0 {
			t.Errorf("incomplete description: %+v", d)
		}
	}
	ro := n.mustRun("./sandbox-mcp tools --json --read-only")
	if strings.Contains(ro, `"workspace_exec"`) || !strings.Contains(ro, `"read_files"`) {
		t.Errorf("--read-only listing is wrong: %.300s", ro)
	}
	text := n.mustRun("./sandbox-mcp tools")
	for _, want := range []string{"workspace_exec", "input schema:", "output schema:", "server instructions:", "NOTICE"} {
		if !strings.Contains(text, want) {
			t.Errorf("tools output lacks %q", want)
		}
	}
}
