//go:build linux

package tools

import (
	"slices"
	"strings"
	"testing"
)

func TestListFiles(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "top.txt", "content": "t"},
		{"path": "a/x.txt", "content": "xx"},
		{"path": "a/b/c/d.txt", "content": "ddd"},
		{"path": "a/b/y.go", "content": "package y"},
		{"path": toolDataDir + "/runs/1/stdout.log", "content": "log"},
	}}, nil)
	h.sbRun("ln", "-s", "a/x.txt", "xlink")

	paths := func(out listFilesOutput) []string {
		var p []string
		for _, e := range out.Entries {
			p = append(p, e.Path)
		}
		return p
	}
	out, _ := okAs[listFilesOutput](h, "list_files", map[string]any{})
	want := []string{toolDataDir, "a", "a/b", "a/x.txt", "top.txt", "xlink"}
	if got := paths(out); !slices.Equal(got, want) || out.Path != "." || out.Total != len(want) || out.Truncated {
		t.Errorf("default listing = %v (total %d), want %v", got, out.Total, want)
	}
	for _, e := range out.Entries {
		switch e.Path {
		case "a/x.txt":
			if e.Type != "file" || e.Size != 2 || e.Mode != "0644" || e.Modified == "" {
				t.Errorf("a/x.txt = %+v", e)
			}
		case "a":
			if e.Type != "dir" {
				t.Errorf("a = %+v", e)
			}
		case "xlink":
			if e.Type != "symlink" || e.SymlinkTarget != "a/x.txt" {
				t.Errorf("xlink = %+v", e)
			}
		}
	}
	out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"depth": 1})
	if got := paths(out); !slices.Equal(got, []string{toolDataDir, "a", "top.txt", "xlink"}) {
		t.Errorf("depth 1 = %v", got)
	}
	out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"glob": "**/*.txt"})
	if got := paths(out); !slices.Equal(got, []string{"a/b/c/d.txt", "a/x.txt", "top.txt"}) {
		t.Errorf("glob **/*.txt = %v", got)
	}
	out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"path": "a", "glob": "*.txt"})
	if got := paths(out); !slices.Equal(got, []string{"a/x.txt"}) || out.Path != "a" {
		t.Errorf("glob relative to path = %v", got)
	}
	out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"glob": "a/b/[cy]*"})
	if got := paths(out); !slices.Equal(got, []string{"a/b/c", "a/b/y.go"}) {
		t.Errorf("glob class = %v", got)
	}
	out, res := okAs[listFilesOutput](h, "list_files", map[string]any{"glob": "**", "max_entries": 2})
	// The listing stops at the first match past the cap: total is a lower
	// bound.
	if len(out.Entries) != 2 || !out.Truncated || out.Total != 3 {
		t.Errorf("truncated listing: %d entries, total %d, truncated %v: %v", len(out.Entries), out.Total, out.Truncated, paths(out))
	}
	mustContain(t, resultText(res), "NOTICE:", "entries 1-2", "at least 3 matched")
	// The tools' own logs show when asked for by name.
	out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"path": toolDataDir, "depth": 3})
	if got := paths(out); !slices.Contains(got, toolDataDir+"/runs/1/stdout.log") {
		t.Errorf("listing .sandbox-mcp = %v", got)
	}
	out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"glob": toolDataDir + "/**/*.log"})
	if got := paths(out); !slices.Equal(got, []string{toolDataDir + "/runs/1/stdout.log"}) {
		t.Errorf("glob into .sandbox-mcp = %v", got)
	}
	// A file lists as itself.
	out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"path": "a/x.txt"})
	if got := paths(out); !slices.Equal(got, []string{"a/x.txt"}) {
		t.Errorf("listing a file = %v", got)
	}
	// Errors.
	mustContain(t, h.fail("list_files", map[string]any{"path": "nope"}), `"nope" does not exist`)
	mustContain(t, h.fail("list_files", map[string]any{"path": "../"}), "leaves the workspace")
	mustContain(t, h.fail("list_files", map[string]any{"path": "/etc"}), "outside the workspace")
	mustContain(t, h.fail("list_files", map[string]any{"glob": "a/[b"}), "malformed")
	h.sbRun("ln", "-s", "/etc", "etclink")
	mustContain(t, h.fail("list_files", map[string]any{"path": "etclink"}), "etclink", "outside the workspace")
	h.fail("list_files", map[string]any{"depth": 11})
	h.fail("list_files", map[string]any{"depth": "2"})
	h.fail("list_files", map[string]any{"recursive": true})
}

func TestListDepth(t *testing.T) {
	tests := []struct {
		depth int
		glob  string
		want  int
	}{
		{depth: 0, want: defaultListDepth},
		{depth: 3, want: 3},
		{depth: 1, glob: "**/*.go", want: 1},
		{glob: "**/*.go", want: maxListDepth},
		{glob: "src/**", want: maxListDepth},
		{glob: "*.go", want: 1},
		{glob: "src/*/x.go", want: 3},
		{glob: "a/b/c/d/e/f/g/h/i/j/k/*.txt", want: maxListDepth},
	}
	for _, tc := range tests {
		var g *globPattern
		if tc.glob != "" {
			var err error
			if g, err = compileGlob("glob", tc.glob); err != nil {
				t.Fatal(err)
			}
		}
		if got := listDepth(tc.depth, g); got != tc.want {
			t.Errorf("listDepth(%d, %q) = %d, want %d", tc.depth, tc.glob, got, tc.want)
		}
	}
}

// TestListFilesByteCap: a listing larger than the byte cap is cut with a
// next_offset, and reading on from it lists the rest.
func TestListFilesByteCap(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	name := strings.Repeat("n", 200)
	h.sbRun("sh", "-c", `cd "$1" && for i in $(seq 1 400); do : > "$2$i"; done`, "sh", h.sbPath("."), name)
	out, res := okAs[listFilesOutput](h, "list_files", map[string]any{"depth": 1})
	if !out.Truncated || out.NextOffset == 0 || out.NextOffset != len(out.Entries) || len(out.Entries) >= 400 {
		t.Fatalf("not cut: %d entries, truncated %v, next %d", len(out.Entries), out.Truncated, out.NextOffset)
	}
	mustContain(t, resultText(res), "more: offset", "continue with offset")
	seen := len(out.Entries)
	for out.Truncated {
		out, _ = okAs[listFilesOutput](h, "list_files", map[string]any{"depth": 1, "offset": out.NextOffset})
		seen += len(out.Entries)
	}
	if seen != out.Total {
		t.Fatalf("saw %d of %d entries", seen, out.Total)
	}
}
