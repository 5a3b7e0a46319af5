package search

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// result is what one Run wrote, decoded.
type result struct {
	matches []Record
	errors  []Record
	sum     Summary
}

func run(t testing.TB, o Options) result {
	t.Helper()
	var out bytes.Buffer
	if err := Run(context.Background(), o, &out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var res result
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 16<<20)
	first := true
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("record %q: %v", sc.Text(), err)
		}
		if first && (r.Type != "start" || r.Version != ProtocolVersion) {
			t.Fatalf("first record %+v", r)
		}
		first = false
		switch r.Type {
		case "match":
			res.matches = append(res.matches, r)
		case "error":
			res.errors = append(res.errors, r)
		case "done":
			res.sum = *r.Summary
		}
	}
	return res
}

func write(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func where(ms []Record) []string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s:%d:%s", m.Path, m.Line, m.Text))
	}
	return out
}

func TestSearch(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.go", "package a\n\nfunc Foo() {}\nfunc bar() { Foo() }\n")
	write(t, root, "sub/b.txt", "hello\nFOO\n<b>&\n")
	write(t, root, ".git/config", "Foo\n")
	write(t, root, ".sandbox-mcp/runs/1/stdout", "Foo\n")
	write(t, root, "bin.dat", "Foo\x00\x01")
	if err := os.Symlink("/etc", filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "passwd")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    Options
		want []string
	}{
		{"regex", Options{Pattern: `Foo\(`}, []string{"a.go:3:func Foo() {}", "a.go:4:func bar() { Foo() }"}},
		{"ignore case", Options{Pattern: "foo", IgnoreCase: true}, []string{"a.go:3:func Foo() {}", "a.go:4:func bar() { Foo() }", "sub/b.txt:2:FOO"}},
		{"literal", Options{Pattern: "<b>&", Literal: true}, []string{"sub/b.txt:3:<b>&"}},
		{"literal is not a regex", Options{Pattern: "() {", Literal: true}, []string{"a.go:3:func Foo() {}", "a.go:4:func bar() { Foo() }"}},
		{"anchors are per line", Options{Pattern: "^func"}, []string{"a.go:3:func Foo() {}", "a.go:4:func bar() { Foo() }"}},
		{"include", Options{Pattern: "o", Include: []string{"*.txt"}}, []string{"sub/b.txt:1:hello"}},
		{"exclude dir", Options{Pattern: "(?i)foo", Exclude: []string{"sub"}}, []string{"a.go:3:func Foo() {}", "a.go:4:func bar() { Foo() }"}},
		{"path glob", Options{Pattern: "FOO", Include: []string{"sub/**/*.txt"}}, []string{"sub/b.txt:2:FOO"}},
		{"dir", Options{Pattern: "FOO", Dir: "sub"}, []string{"sub/b.txt:2:FOO"}},
		{"no match across lines", Options{Pattern: `hello\nFOO`}, nil},
		{"max matches", Options{Pattern: "o", MaxMatches: 1}, []string{"a.go:3:func Foo() {}"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Root = root
			res := run(t, tc.o)
			if got := where(res.matches); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("matches:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	res := run(t, Options{Root: root, Pattern: "Foo"})
	if res.sum.BinarySkipped != 1 || res.sum.FilesScanned != 3 || res.sum.FilesMatched != 1 || res.sum.Matches != 2 || res.sum.Truncated {
		t.Errorf("summary %+v", res.sum)
	}
	if res := run(t, Options{Root: root, Pattern: "o", MaxMatches: 1}); !res.sum.Truncated || res.sum.Reason != "max_matches" {
		t.Errorf("max matches summary %+v", res.sum)
	}
}

func TestContext(t *testing.T) {
	root := t.TempDir()
	write(t, root, "f", "1\n2\n3 x\n4\n5\n6\n7 x\n8\n")
	res := run(t, Options{Root: root, Pattern: "x", Context: 2})
	if len(res.matches) != 2 {
		t.Fatalf("matches %+v", res.matches)
	}
	m := res.matches[0]
	if m.Line != 3 || strings.Join(m.Before, ",") != "1,2" || strings.Join(m.After, ",") != "4,5" {
		t.Errorf("first %+v", m)
	}
	m = res.matches[1]
	if m.Line != 7 || strings.Join(m.Before, ",") != "5,6" || strings.Join(m.After, ",") != "8" {
		t.Errorf("second %+v", m)
	}
}

// TestChunks checks line numbers and context across read chunks, and a
// single line longer than any buffer.
func TestChunks(t *testing.T) {
	root := t.TempDir()
	var b strings.Builder
	for i := 1; i <= 100_000; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	write(t, root, "big", b.String())
	res := run(t, Options{Root: root, Pattern: `^line (1|50000|99999)$`, Context: 1})
	got := where(res.matches)
	want := []string{"big:1:line 1", "big:50000:line 50000", "big:99999:line 99999"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %q", got)
	}
	for _, m := range res.matches[1:] {
		if len(m.Before) != 1 || len(m.After) != 1 || m.Before[0] != fmt.Sprintf("line %d", m.Line-1) || m.After[0] != fmt.Sprintf("line %d", m.Line+1) {
			t.Errorf("context of %d: %q %q", m.Line, m.Before, m.After)
		}
	}

	huge := strings.Repeat("a", 10<<20) + "NEEDLE" + strings.Repeat("b", 1000) + "\nnext NEEDLE\n"
	write(t, root, "huge", huge)
	res = run(t, Options{Root: root, Pattern: "NEEDLE", Include: []string{"huge"}})
	if len(res.matches) != 2 || res.matches[0].Line != 1 || !res.matches[0].Cut || !strings.Contains(res.matches[0].Text, "NEEDLE") ||
		len(res.matches[0].Text) > DefaultMaxLineBytes || res.matches[1].Line != 2 {
		t.Fatalf("huge line: %+v", where(res.matches))
	}
}

func TestBounds(t *testing.T) {
	root := t.TempDir()
	for i := range 50 {
		write(t, root, fmt.Sprintf("d/f%02d", i), strings.Repeat("match me\n", 10))
	}
	if res := run(t, Options{Root: root, Pattern: "match", MaxFiles: 5, MaxMatches: 1000}); res.sum.FilesScanned != 5 || res.sum.Reason != "max_files" {
		t.Errorf("max files: %+v", res.sum)
	}
	if res := run(t, Options{Root: root, Pattern: "match", MaxBytes: 100, MaxMatches: 1000}); res.sum.Reason != "max_bytes" || len(res.matches) != 12 {
		t.Errorf("max bytes: %d matches, %+v", len(res.matches), res.sum)
	}
}

func TestBadOptions(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), Options{Root: t.TempDir(), Pattern: "("}, &out); err == nil {
		t.Error("invalid regex accepted")
	}
	if err := Run(context.Background(), Options{Root: t.TempDir(), Pattern: "x", Dir: "missing"}, &out); err == nil {
		t.Error("missing dir accepted")
	}
	// A directory that climbs out, or is a symlink leading out, is refused.
	root := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"../../../etc", "etc", "/proc/self"} {
		out.Reset()
		err := Run(context.Background(), Options{Root: root, Pattern: "root", Dir: dir}, &out)
		if err == nil || out.Len() > 0 {
			t.Errorf("dir %q: %v, output %q", dir, err, out.String())
		}
	}
}
