//go:build linux

package tools

import (
	"os"
	"strings"
	"testing"
)

func TestSearchFiles(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("src/a.go", "package a\n\n// TODO: one\nfunc A() {}\n// todo: two\n")
	h.sbWrite("src/b.py", "x = 1 < 2 & 3\n# TODO three\n")
	h.sbWrite("node_modules/m.js", "// TODO vendored\n")
	h.sbWrite(".git/HEAD", "TODO\n")
	h.sbWrite("blob.bin", "TODO\x00\x00")
	out, _ := okAs[searchFilesOutput](h, "search_files", map[string]any{"pattern": "TODO", "exclude": []string{"node_modules"}})
	if out.MatchCount != 2 || out.FilesMatched != 2 || out.BinarySkipped != 1 || out.Truncated {
		t.Errorf("output %+v", out)
	}
	// The helper was uploaded once (managetest sandboxes have no lean envd
	// at /.sandbox-mcp/envd) and the next call reuses it.
	ents, err := os.ReadDir(h.sbPath(helperDir))
	if err != nil || len(ents) != 1 {
		t.Fatalf("helper dir: %v %v", ents, err)
	}
	out, _ = okAs[searchFilesOutput](h, "search_files", map[string]any{"pattern": "todo", "case_insensitive": true, "path": "src", "glob": []string{"*.go"}, "context_lines": 1})
	if out.MatchCount != 2 {
		t.Fatalf("output %+v", out)
	}
	mustContain(t, (&out).ModelText(), "2 matching line(s) in 1 file(s)", "src/a.go\n2-\n3:// TODO: one\n4-func A() {}\n5:// todo: two")
	out, _ = okAs[searchFilesOutput](h, "search_files", map[string]any{"pattern": "< 2 &", "literal": true})
	if out.MatchCount != 1 || out.Matches[0].Text != "x = 1 < 2 & 3" {
		t.Errorf("literal: %+v", out)
	}
	out, _ = okAs[searchFilesOutput](h, "search_files", map[string]any{"pattern": "o", "max_results": 2})
	if !out.Truncated || out.StoppedBy != "max_results" || len(out.Matches) != 2 {
		t.Errorf("bounded: %+v", out)
	}
	mustContain(t, (&out).ModelText(), "Stopped early")
}

func TestSearchFilesErrors(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("f.txt", "x\n")
	h.sbRun("ln", "-s", "/proc", "proc")
	h.sbRun("ln", "-s", "/etc", "etc")
	cases := []struct {
		name string
		args map[string]any
		want []string
	}{
		{"invalid regex", map[string]any{"pattern": "foo(bar"}, []string{"pattern", "missing closing )", "at byte 3"}},
		{"lookahead", map[string]any{"pattern": "a(?=b)"}, []string{"invalid or unsupported Perl syntax", "at byte 1", "lookaround"}},
		{"dotdot", map[string]any{"pattern": "x", "path": "../.."}, []string{"leaves the workspace"}},
		{"proc", map[string]any{"pattern": "x", "path": "/proc"}, []string{"outside the workspace"}},
		{"symlink to proc", map[string]any{"pattern": "x", "path": "proc/self"}, []string{"outside the workspace"}},
		{"symlink to etc", map[string]any{"pattern": "root", "path": "etc"}, []string{"outside the workspace"}},
		{"glob escape", map[string]any{"pattern": "x", "glob": []string{"../*"}}, []string{"glob[0]", ".."}},
		{"a file", map[string]any{"pattern": "x", "path": "f.txt"}, []string{"not a directory"}},
		{"missing", map[string]any{"pattern": "x", "path": "nope"}, []string{"does not exist"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mustContain(t, h.fail("search_files", tc.args), tc.want...)
		})
	}
	// Symlinks inside the tree are not followed: /etc's and /proc's files
	// are not searched from the root either.
	out, _ := okAs[searchFilesOutput](h, "search_files", map[string]any{"pattern": "root|self"})
	if out.MatchCount != 0 || out.FilesScanned != 1 {
		t.Errorf("root search: %+v", out)
	}
}

// TestSearchFilesHugeLine: a single 20 MiB line is matched with bounded
// memory and shown cut around the match.
func TestSearchFilesHugeLine(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	line := strings.Repeat("x", 20<<20) + "NEEDLE" + strings.Repeat("y", 100)
	if err := os.WriteFile(h.sbPath("huge.txt"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := okAs[searchFilesOutput](h, "search_files", map[string]any{"pattern": "NEEDLE"})
	if out.MatchCount != 1 || !out.Matches[0].Cut || !strings.Contains(out.Matches[0].Text, "NEEDLE") || len(out.Matches[0].Text) > 300 {
		t.Errorf("huge line: %+v", out)
	}
}
