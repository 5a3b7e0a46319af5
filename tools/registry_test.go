//go:build linux

package tools

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

// snapDir holds the golden tool definitions: what the model sees.
var snapDir = filepath.Join("..", "testdata", "toolsnaps")

// toolSnapshot is a tool's golden file: its toolset, and the definition
// exactly as a client receives it in tools/list (the JSON of the mcp.Tool).
type toolSnapshot struct {
	Toolset string          `json:"toolset"`
	Tool    json.RawMessage `json:"tool"`
}

// TestToolSnapshots compares every tool's definition (name, title,
// description, annotations, input and output schemas, as sent) and toolset
// with its golden file. UPDATE_TOOLSNAPS=true rewrites them; a missing or
// stale snapshot fails, so a schema change is always a reviewed diff.
func TestToolSnapshots(t *testing.T) {
	update := os.Getenv("UPDATE_TOOLSNAPS") == "true"
	d := NewDeps(nil, DefaultConfig(), nil)
	seen := map[string]bool{}
	for _, tool := range All(d) {
		wire, err := json.Marshal(tool.Def)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.MarshalIndent(toolSnapshot{Toolset: tool.Toolset, Tool: wire}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		name := tool.Def.Name
		path := filepath.Join(snapDir, name+".snap")
		seen[name+".snap"] = true
		if update {
			if err := os.MkdirAll(snapDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: no snapshot (%v); run UPDATE_TOOLSNAPS=true go test ./tools/ -run TestToolSnapshots and review the diff", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the tool definition changed from %s; if intended, run UPDATE_TOOLSNAPS=true go test ./tools/ -run TestToolSnapshots and review the diff.\n--- got ---\n%s", name, path, got)
		}
	}
	entries, _ := os.ReadDir(snapDir)
	for _, e := range entries {
		if !seen[e.Name()] {
			if update {
				os.Remove(filepath.Join(snapDir, e.Name()))
				continue
			}
			t.Errorf("snapshot %s has no tool; remove it", e.Name())
		}
	}
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z_]*[a-z]$`)

// TestRegistryGuardrails checks what every tool must have: a unique
// snake_case name, a title, a description, all four annotations, a toolset
// that exists, and input and output schemas that compile and describe closed
// objects whose every property has a description.
func TestRegistryGuardrails(t *testing.T) {
	d := NewDeps(nil, DefaultConfig(), nil)
	all := All(d)
	if len(all) != 14 {
		t.Errorf("%d tools; the design lists 14", len(all))
	}
	names := map[string]bool{}
	for _, tool := range all {
		def := tool.Def
		if !snakeCase.MatchString(def.Name) || names[def.Name] {
			t.Errorf("tool name %q: must be unique snake_case", def.Name)
		}
		names[def.Name] = true
		if def.Title == "" || def.Annotations.Title == "" {
			t.Errorf("%s: no title", def.Name)
		}
		if len(strings.Fields(def.Description)) < 12 {
			t.Errorf("%s: the description is too thin for a model: %q", def.Name, def.Description)
		}
		a := def.Annotations
		if a.ReadOnlyHint == nil || a.DestructiveHint == nil || a.IdempotentHint == nil || a.OpenWorldHint == nil {
			t.Errorf("%s: every annotation hint must be set explicitly", def.Name)
		}
		if a.ReadOnlyHint != nil && *a.ReadOnlyHint && a.DestructiveHint != nil && *a.DestructiveHint {
			t.Errorf("%s: read-only and destructive at once", def.Name)
		}
		if !slices.ContainsFunc(Toolsets, func(ts ToolsetInfo) bool { return ts.Name == tool.Toolset }) {
			t.Errorf("%s: toolset %q does not exist", def.Name, tool.Toolset)
		}
		for kind, raw := range map[string]json.RawMessage{"input": def.RawInputSchema, "output": def.RawOutputSchema} {
			checkSchema(t, def.Name+" "+kind, raw)
		}
	}
	for _, ts := range Toolsets {
		if !slices.ContainsFunc(all, func(tool Tool) bool { return tool.Toolset == ts.Name }) {
			t.Errorf("toolset %s has no tool", ts.Name)
		}
	}
}

func checkSchema(t *testing.T, what string, raw json.RawMessage) {
	t.Helper()
	doc, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Errorf("%s schema is not JSON: %v", what, err)
		return
	}
	c := validator.NewCompiler()
	if err := c.AddResource("mem:///"+strings.ReplaceAll(what, " ", "/"), doc); err != nil {
		t.Errorf("%s schema: %v", what, err)
		return
	}
	if _, err := c.Compile("mem:///" + strings.ReplaceAll(what, " ", "/")); err != nil {
		t.Errorf("%s schema does not compile: %v", what, err)
	}
	var s map[string]any
	_ = json.Unmarshal(raw, &s)
	if s["type"] != "object" {
		t.Errorf("%s schema: root type %v, want object", what, s["type"])
	}
	checkProperties(t, what, s)
}

// checkProperties walks object schemas: closed, every property described.
func checkProperties(t *testing.T, where string, s map[string]any) {
	t.Helper()
	if s["type"] == "object" {
		if ap, ok := s["additionalProperties"]; !ok || ap != false {
			if _, isMap := ap.(map[string]any); !isMap {
				t.Errorf("%s: object schema is not closed (additionalProperties: false)", where)
			}
		}
	}
	props, _ := s["properties"].(map[string]any)
	for name, p := range props {
		ps, _ := p.(map[string]any)
		if desc, _ := ps["description"].(string); desc == "" {
			t.Errorf("%s.%s: no description", where, name)
		}
		checkProperties(t, where+"."+name, ps)
		if items, ok := ps["items"].(map[string]any); ok {
			checkProperties(t, where+"."+name+"[]", items)
		}
	}
}

func TestSelected(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReadOnly = true
	ro, err := Selected(NewDeps(nil, cfg, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range ro {
		if !tool.ReadOnly() {
			t.Errorf("--read-only registered %s", tool.Def.Name)
		}
	}
	if len(ro) == 0 {
		t.Fatal("--read-only registered nothing")
	}
	cfg = DefaultConfig()
	cfg.Toolsets = []string{"files", " admin"}
	some, err := Selected(NewDeps(nil, cfg, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range some {
		if tool.Toolset != ToolsetFiles && tool.Toolset != ToolsetAdmin {
			t.Errorf("--toolsets files,admin registered %s (%s)", tool.Def.Name, tool.Toolset)
		}
	}
	cfg.Toolsets = []string{"nope"}
	if _, err := Selected(NewDeps(nil, cfg, nil)); err == nil || !strings.Contains(err.Error(), "exec") {
		t.Errorf("unknown toolset: %v; want an error listing the toolsets", err)
	}
}

// Arguments failing the schema come back as isError naming the field and
// the reason, and the server keeps serving.
func TestSchemaErrorsNameTheField(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cases := []struct {
		tool string
		args map[string]any
		want []string
	}{
		{"workspace_exec", map[string]any{"command": 1}, []string{"invalid argument command", "string"}},
		{"workspace_exec", map[string]any{"command": "true", "timeout_sec": 1.5}, []string{"timeout_sec", "integer"}},
		{"workspace_exec", map[string]any{"command": "true", "timeout_sec": 0}, []string{"invalid argument timeout_sec: must be at least 1 (got 0)"}},
		{"process_output", map[string]any{"process": "g1-p1", "wait_sec": 61}, []string{"invalid argument wait_sec: must be at most 60 (got 61)"}},
		{"collect_outputs", map[string]any{"globs": []string{"*"}, "max_bytes": 1 << 33}, []string{"must be at most 4294967296 (got 8589934592)"}},
		{"workspace_exec", map[string]any{"command": "true", "bogus": true}, []string{"bogus"}},
		{"read_files", map[string]any{}, []string{"paths"}},
		{"put_files", map[string]any{"files": []any{map[string]any{"path": "a"}}}, []string{"files[0]", "content"}},
	}
	for _, tc := range cases {
		text := h.fail(tc.tool, tc.args)
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s(%v): %q does not mention %q", tc.tool, tc.args, text, w)
			}
		}
		if strings.Contains(text, "&{") {
			t.Errorf("%s: Go struct syntax leaked into the message: %q", tc.tool, text)
		}
	}
	var info struct {
		Generation int64 `json:"generation"`
	}
	h.ok("workspace_info", map[string]any{}, &info)
}
