package search

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	benchOnce sync.Once
	benchRoot string
)

// benchTreeDir is where benchTree keeps its tree between runs (it is
// deterministic and costs seconds to write); benchTreeDone marks it whole.
const (
	benchTreeDir  = "sandbox-mcp-search-bench-50k"
	benchTreeDone = ".complete"
)

// benchTree returns a tree of 50,000 small source-like files in 500
// directories, one in 100 containing the needle, written once into the
// temporary directory and reused by later runs.
func benchTree(b *testing.B) string {
	benchOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), benchTreeDir)
		if _, err := os.Stat(filepath.Join(dir, benchTreeDone)); err == nil {
			benchRoot = dir
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		body := []byte{}
		for i := range 40 {
			body = fmt.Appendf(body, "func handler%d(w http.ResponseWriter, r *http.Request) { return nil }\n", i)
		}
		for d := range 500 {
			sub := filepath.Join(dir, fmt.Sprintf("pkg%03d", d))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
			for f := range 100 {
				data := body
				if f == 0 {
					data = append(append([]byte{}, body...), "// NEEDLE_MARKER here\n"...)
				}
				if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.go", f)), data, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
		// The marker is empty: both searches read it and find nothing.
		if err := os.WriteFile(filepath.Join(dir, benchTreeDone), nil, 0o644); err != nil {
			b.Fatal(err)
		}
		benchRoot = dir
	})
	if benchRoot == "" {
		b.FailNow()
	}
	return benchRoot
}

// BenchmarkTree50k compares the search with grep -rn on the same tree, in
// the same run: a rare literal-prefixed regex, and a case-insensitive one.
func BenchmarkTree50k(b *testing.B) {
	root := benchTree(b)
	for _, pat := range []struct{ name, re, grep string }{
		{"rare", `NEEDLE_\w+`, `NEEDLE_[[:alnum:]_]*`},
		{"common", `handler3\d\(`, `handler3[0-9](`},
	} {
		b.Run("search/"+pat.name, func(b *testing.B) {
			for b.Loop() {
				if err := Run(context.Background(), Options{Root: root, Pattern: pat.re, MaxMatches: 1 << 30, MaxBytes: 1 << 40}, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("grep/"+pat.name, func(b *testing.B) {
			if _, err := exec.LookPath("grep"); err != nil {
				b.Skip("no grep")
			}
			for b.Loop() {
				cmd := exec.Command("grep", "-rn", pat.grep, root)
				cmd.Stdout = io.Discard
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
