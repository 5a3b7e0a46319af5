//go:build linux

package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// corpusSource is a Go file of about 200 lines with the characters HTML
// escaping touches (<, >, &), for the read_files case.
func corpusSource() string {
	var b strings.Builder
	b.WriteString("package demo\n\nimport \"fmt\"\n\n")
	for i := 0; i < 28; i++ {
		fmt.Fprintf(&b, "// Clamp%d returns v within [lo, hi]: lo <= v && v <= hi.\nfunc Clamp%d(v, lo, hi int) int {\n\tif v < lo {\n\t\treturn lo\n\t}\n\tif v > hi && hi > lo {\n\t\treturn hi\n\t}\n", i, i)
		fmt.Fprintf(&b, "\treturn v\n}\n\n")
	}
	b.WriteString("func main() { fmt.Println(Clamp0(5, 1, 3)) }\n")
	return b.String()
}

// corpusCalls is the fixed set of calls whose results' tokens the bench
// counts.
var corpusCalls = []struct {
	name string
	tool string
	args map[string]any
}{
	{"exec_echo", "workspace_exec", map[string]any{"command": "echo hello"}},
	{"exec_build_log", "workspace_exec", map[string]any{"command": `for i in $(seq 1 40); do echo "src/pkg$i/file.go:$i:5: warning: x < y && y > z is always false for <nil> & friends"; done; echo "FAIL: 3 errors" >&2; exit 1`}},
	{"exec_traceback", "workspace_exec", map[string]any{"command": `printf 'Traceback (most recent call last):\n  File "<stdin>", line 1, in <module>\n  File "/usr/lib/python3/json/__init__.py", line 346, in loads\n    return _default_decoder.decode(s)\njson.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)\n' >&2; exit 1`}},
	{"exec_html", "workspace_exec", map[string]any{"command": `for i in $(seq 1 20); do echo "<tr><td class=\"n\">$i</td><td>a &amp; b</td></tr>"; done`}},
	{"read_source", "read_files", map[string]any{"paths": []string{"corpus/demo.go"}}},
	{"list_tree", "list_files", map[string]any{"path": "corpus", "depth": 3}},
	{"error_missing", "read_files", map[string]any{"paths": []string{"corpus/missing.txt"}}},
}

// TestTokenCorpus writes the text a model reads of corpusCalls' results,
// before (the JSON text with HTML escaping that results carried until the
// text rendering) and after (the text format), to $TOKEN_CORPUS_DIR/before
// and /after, for scripts/tokens to count. It is skipped without the
// variable.
func TestTokenCorpus(t *testing.T) {
	dir := os.Getenv("TOKEN_CORPUS_DIR")
	if dir == "" {
		t.Skip("TOKEN_CORPUS_DIR is not set")
	}
	for _, format := range []ResultFormat{ResultJSON, ResultText} {
		h := newHarness(t, harnessOptions{config: Config{ResultFormat: format}})
		h.sbWrite("corpus/demo.go", corpusSource())
		for i := 0; i < 4; i++ {
			for j := 0; j < 5; j++ {
				h.sbWrite(fmt.Sprintf("corpus/pkg%d/file%d.go", i, j), "package x\n")
			}
		}
		sub := "after"
		if format == ResultJSON {
			sub = "before"
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, call := range corpusCalls {
			res := h.call(call.tool, call.args)
			var parts []string
			for _, c := range res.Content {
				tc, ok := mcp.AsTextContent(c)
				if !ok {
					continue
				}
				text := tc.Text
				if format == ResultJSON && strings.HasPrefix(text, "{") {
					// What json.Marshal made of it: HTML escaped.
					text = strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "&", `\u0026`).Replace(text)
				}
				parts = append(parts, text)
			}
			if err := os.WriteFile(filepath.Join(dir, sub, call.name+".txt"), []byte(strings.Join(parts, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
