package tools

import (
	"regexp"
	"strings"
	"testing"
)

// The descriptions of the tools a server offers, and its instructions,
// name only tools it offers: with some toolsets or in read-only mode they
// do not send the model to a tool it does not have (or offer writes).
func TestDescriptionsNameOnlyOfferedTools(t *testing.T) {
	toolName := regexp.MustCompile(`\b(workspace_exec|workspace_info|workspace_reset|process_output|process_input|process_signal|process_list|put_files|read_files|list_files|stage_inputs|collect_outputs|edit_file|search_files)\b`)
	configs := map[string]Config{
		"read-only":            {ReadOnly: true},
		"exec":                 {Toolsets: []string{ToolsetExec}},
		"exec,files":           {Toolsets: []string{ToolsetExec, ToolsetFiles}},
		"files":                {Toolsets: []string{ToolsetFiles}},
		"process,files":        {Toolsets: []string{ToolsetProcess, ToolsetFiles}},
		"read-only with store": {ReadOnly: true, ArtifactsDir: t.TempDir(), StageRoots: map[string]string{"data": t.TempDir()}},
		"admin with store":     {Toolsets: []string{ToolsetAdmin}, ArtifactsDir: t.TempDir(), StageRoots: map[string]string{"data": t.TempDir()}},
		"transfer with store":  {Toolsets: []string{ToolsetTransfer}, ArtifactsDir: t.TempDir(), StageRoots: map[string]string{"data": t.TempDir()}},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			d := NewDeps(nil, cfg, nil)
			tools, err := Selected(d)
			if err != nil {
				t.Fatal(err)
			}
			offered := map[string]bool{}
			for _, tool := range tools {
				offered[tool.Def.Name] = true
			}
			texts := map[string]string{"instructions": Instructions(d.Config)}
			for _, tool := range tools {
				texts[tool.Def.Name] = tool.Def.Description
			}
			for where, text := range texts {
				for _, m := range toolName.FindAllString(text, -1) {
					if !offered[m] {
						t.Errorf("%s names %s, which this server does not offer: %q", where, m, text)
					}
				}
				if cfg.ReadOnly && (strings.Contains(text, "background: true") || strings.Contains(text, "Write ")) {
					t.Errorf("%s offers writes in read-only mode: %q", where, text)
				}
			}
		})
	}
}
