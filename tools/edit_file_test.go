//go:build linux

package tools

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func edits(pairs ...string) []map[string]any {
	var out []map[string]any
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, map[string]any{"old_text": pairs[i], "new_text": pairs[i+1]})
	}
	return out
}

func TestEditFile(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var b strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	h.sbWrite("f.txt", b.String())
	h.sbRun("chmod", "0751", "f.txt")
	out, res := okAs[editFileOutput](h, "edit_file", map[string]any{"path": "f.txt", "edits": edits("line 5\n", "line five\nline 5b\n", "line 25\n", "")})
	if out.Replacements != 2 || out.LinesBefore != 30 || out.Lines != 30 || out.Mode != "0751" || len(out.Snippets) != 2 {
		t.Errorf("output %+v", out)
	}
	if out.Snippets[0].StartLine != 2 || !strings.HasPrefix(out.Snippets[0].Text, "line 2\nline 3\nline 4\nline five\nline 5b\nline 6\n") {
		t.Errorf("snippet 0 %+v", out.Snippets[0])
	}
	if out.Edits[0].Lines[0] != 5 || out.Edits[1].Lines[0] != 26 {
		t.Errorf("edit lines %+v", out.Edits)
	}
	want := strings.Replace(strings.Replace(b.String(), "line 5\n", "line five\nline 5b\n", 1), "line 25\n", "", 1)
	if got := string(h.sbRead("f.txt")); got != want {
		t.Errorf("file:\n%s", got)
	}
	if st, _ := h.sbStat("f.txt"); st.Mode != 0o751 {
		t.Errorf("mode %o", st.Mode)
	}
	text := (&out).ModelText()
	mustContain(t, text, "Edited f.txt: 2 replacement(s) from 2 edit(s); 30 → 30 lines", "     5\tline five", "    26\tline 26")
	_ = res

	// replace_all, and a later edit that works on the earlier one's result.
	h.sbWrite("g.go", "a := x\nb := x\nc := y\n")
	out, _ = okAs[editFileOutput](h, "edit_file", map[string]any{"path": "g.go", "edits": []map[string]any{
		{"old_text": "x", "new_text": "z", "replace_all": true},
		{"old_text": "b := z", "new_text": "b := w"},
	}})
	if got := string(h.sbRead("g.go")); got != "a := z\nb := w\nc := y\n" || out.Replacements != 3 {
		t.Errorf("replace_all: %q, %+v", got, out)
	}

	// CRLF files take LF old_text.
	h.sbWrite("crlf.txt", "one\r\ntwo\r\nthree\r\n")
	okAs[editFileOutput](h, "edit_file", map[string]any{"path": "crlf.txt", "edits": edits("one\ntwo\n", "1\n2\n")})
	if got := string(h.sbRead("crlf.txt")); got != "1\r\n2\r\nthree\r\n" {
		t.Errorf("crlf: %q", got)
	}
}

func TestEditFileErrors(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("code.py", "def f():\n    return 1\n\ndef g():\n    return 1\n")
	h.sbWrite("bin", "ab\x00cd")
	h.sbRun("mkdir", "dir")
	if err := os.WriteFile(h.sbPath("big"), make([]byte, maxEditBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args map[string]any
		want []string
	}{
		{"empty old_text", map[string]any{"path": "code.py", "edits": edits("", "x")}, []string{"edits[0].old_text", "is empty"}},
		{"no-op", map[string]any{"path": "code.py", "edits": edits("f", "f")}, []string{"the same"}},
		{"ambiguous", map[string]any{"path": "code.py", "edits": edits("    return 1\n", "    return 2\n")}, []string{"occurs 2 times", "lines 2, 5", "replace_all"}},
		{"whitespace", map[string]any{"path": "code.py", "edits": edits("def g():\n  return 1", "x")}, []string{"whitespace is ignored", "lines 4-5", "     5\t    return 1"}},
		{"closest", map[string]any{"path": "code.py", "edits": edits("def gg():\n    retrun 1", "x")}, []string{"most similar text is at line 4", "     4\tdef g():"}},
		{"nothing alike", map[string]any{"path": "code.py", "edits": edits("zzzzqqqq", "x")}, []string{"no lines resemble it"}},
		{"binary", map[string]any{"path": "bin", "edits": edits("ab", "x")}, []string{"binary file"}},
		{"missing", map[string]any{"path": "nope.txt", "edits": edits("a", "b")}, []string{"does not exist", "put_files"}},
		{"directory", map[string]any{"path": "dir", "edits": edits("a", "b")}, []string{"is a directory"}},
		{"too large", map[string]any{"path": "big", "edits": edits("a", "b")}, []string{"more than edit_file's limit of 10485760"}},
		{"all or nothing", map[string]any{"path": "code.py", "edits": edits("def f", "def h", "missing text", "x")}, []string{"edits[1].old_text"}},
		{"dotdot", map[string]any{"path": "../escape", "edits": edits("a", "b")}, []string{"leaves the workspace"}},
		{"absolute outside", map[string]any{"path": "/etc/passwd", "edits": edits("root", "toor")}, []string{"outside the workspace"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mustContain(t, h.fail("edit_file", tc.args), tc.want...)
		})
	}
	if got := string(h.sbRead("code.py")); got != "def f():\n    return 1\n\ndef g():\n    return 1\n" {
		t.Errorf("code.py changed: %q", got)
	}
}

// TestEditFileAttacks: symlinks that lead out, and a file swapped or changed
// between the read and the write.
func TestEditFileAttacks(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	outside := t.TempDir() + "/secret"
	if err := os.WriteFile(outside, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.sbRun("ln", "-s", outside, "link")
	h.sbRun("ln", "-s", "/etc", "etcdir")
	mustContain(t, h.fail("edit_file", map[string]any{"path": "link", "edits": edits("secret", "pwned")}), "outside the workspace")
	mustContain(t, h.fail("edit_file", map[string]any{"path": "etcdir/hostname", "edits": edits("a", "b")}), "outside the workspace")

	h.sbWrite("victim.txt", "hello\n")
	t.Cleanup(func() { editReadHook = nil })
	// A symlink swapped in for the file after the read: nothing is written,
	// neither through the link nor over it.
	editReadHook = func(dest string) {
		_ = os.Remove(dest)
		_ = os.Symlink(outside, dest)
	}
	mustContain(t, h.fail("edit_file", map[string]any{"path": "victim.txt", "edits": edits("hello", "pwned")}), "changed while it was being edited", "nothing was written")
	if b, _ := os.ReadFile(outside); string(b) != "secret\n" {
		t.Errorf("outside file changed: %q", b)
	}
	if target, err := os.Readlink(h.sbPath("victim.txt")); target != outside {
		t.Errorf("victim.txt: %q, %v", target, err)
	}

	// Another writer changes the file after the read: refused, their
	// change kept.
	h.sbRun("rm", "victim.txt")
	h.sbWrite("victim.txt", "hello\n")
	editReadHook = func(dest string) { _ = os.WriteFile(dest, []byte("hello from someone else\n"), 0o644) }
	mustContain(t, h.fail("edit_file", map[string]any{"path": "victim.txt", "edits": edits("hello", "bye")}), "changed while it was being edited")
	if got := string(h.sbRead("victim.txt")); got != "hello from someone else\n" {
		t.Errorf("victim.txt = %q", got)
	}
	editReadHook = nil
	entries, _ := os.ReadDir(h.sbPath("."))
	for _, e := range entries {
		if strings.Contains(e.Name(), tmpMarker) {
			t.Errorf("temporary left: %s", e.Name())
		}
	}
}
