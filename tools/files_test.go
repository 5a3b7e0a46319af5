package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"path"
	"slices"
	"strings"
	"testing"

	envdclient "github.com/sandbox-mcp/sandbox-mcp/envd/client"
)

func TestPutFilesTextBase64AndMode(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	var out putFilesOutput
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "hello.txt", "content": "héllo\n"},
		{"path": "data/blob.bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"},
		{"path": "deep/er/still/run.sh", "content": "#!/bin/sh\necho hi\n", "mode": "0755"},
		{"path": "private.txt", "content": "x", "mode": "600"},
	}}, &out)

	if got := string(h.sbRead("hello.txt")); got != "héllo\n" {
		t.Errorf("hello.txt = %q", got)
	}
	if got := h.sbRead("data/blob.bin"); !bytes.Equal(got, bin) {
		t.Errorf("blob.bin = %v, want %v", got, bin)
	}
	for rel, want := range map[string]uint32{"deep/er/still/run.sh": 0o755, "private.txt": 0o600, "hello.txt": 0o644} {
		e, err := h.sbStat(rel)
		if err != nil {
			t.Fatal(err)
		}
		if e.Mode != want {
			t.Errorf("%s mode = %o, want %o", rel, e.Mode, want)
		}
	}
	if e, err := h.sbStat("deep/er"); err != nil || e.Type != envdclient.TypeDir {
		t.Errorf("parent deep/er not created: %v %v", e, err)
	}
	want := []writtenFile{
		{Path: "hello.txt", Bytes: int64(len("héllo\n")), Mode: "0644"},
		{Path: "data/blob.bin", Bytes: int64(len(bin)), Mode: "0644"},
		{Path: "deep/er/still/run.sh", Bytes: 18, Mode: "0755"},
		{Path: "private.txt", Bytes: 1, Mode: "0600"},
	}
	if !slices.Equal(out.Written, want) {
		t.Errorf("written = %+v\nwant %+v", out.Written, want)
	}
	// No temporaries are left behind.
	var list listFilesOutput
	h.ok("list_files", map[string]any{"glob": "**"}, &list)
	for _, e := range list.Entries {
		if strings.Contains(e.Path, tmpMarker) {
			t.Errorf("temporary left: %s", e.Path)
		}
	}
}

func TestPutFilesReplaceKeepsModeAndSymlink(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "run.sh", "content": "v1", "mode": "0755"}}}, nil)
	var out putFilesOutput
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "run.sh", "content": "v2"}}}, &out)
	if e, _ := h.sbStat("run.sh"); e.Mode != 0o755 || out.Written[0].Mode != "0755" {
		t.Errorf("replaced file mode = %o (reported %s), want 0755 kept", e.Mode, out.Written[0].Mode)
	}
	// A symlink inside the workspace is written through, and stays a link.
	h.sbWrite("target.txt", "old")
	h.sbRun("ln", "-s", "target.txt", "link.txt")
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "link.txt", "content": "new"}}}, nil)
	if got := string(h.sbRead("target.txt")); got != "new" {
		t.Errorf("target.txt = %q, want new", got)
	}
	if e, _ := h.sbStat("link.txt"); e.Type != envdclient.TypeSymlink {
		t.Errorf("link.txt is %v now, want still a symlink", e.Type)
	}
}

func TestPutFilesAllOrNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("keep.txt", "old")
	h.sbRun("mkdir", "adir")
	cases := []struct {
		name  string
		third map[string]any
		want  []string
	}{
		{"dotdot", map[string]any{"path": "../escape.txt", "content": "x"}, []string{"files[2].path", "leaves the workspace"}},
		{"absolute", map[string]any{"path": "/etc/evil", "content": "x"}, []string{"files[2].path", "outside the workspace"}},
		{"nul", map[string]any{"path": "a\x00b", "content": "x"}, []string{"files[2].path", "NUL"}},
		{"directory", map[string]any{"path": "adir", "content": "x"}, []string{"files[2].path", "is a directory"}},
		{"under a file", map[string]any{"path": "keep.txt/child", "content": "x"}, []string{"not a directory"}},
		{"bad mode", map[string]any{"path": "m.txt", "content": "x", "mode": "0999"}, []string{"mode"}},
		{"bad base64", map[string]any{"path": "b.bin", "content": "!!!not base64", "encoding": "base64"}, []string{"files[2].content", "base64"}},
		{"duplicate", map[string]any{"path": "./keep.txt", "content": "x"}, []string{"files[2].path", "same file as files[0].path"}},
		{"root", map[string]any{"path": ".", "content": "x"}, []string{"files[2].path", "workspace root"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := h.fail("put_files", map[string]any{"files": []map[string]any{
				{"path": "keep.txt", "content": "new"},
				{"path": "fresh/new1.txt", "content": "x"},
				tc.third,
			}})
			mustContain(t, text, tc.want...)
			if got := string(h.sbRead("keep.txt")); got != "old" {
				t.Errorf("keep.txt = %q after a failed batch", got)
			}
			if h.sbExists("fresh") {
				t.Errorf("fresh/ was created by a failed batch")
			}
		})
	}
}

// The rollback itself: an upload that fails after others succeeded removes
// the temporaries and the directories the batch created.
func TestUploadBatchRollback(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("keep.txt", "old")
	l := h.lease()
	c := &Call{ctx: context.Background(), d: h.deps, ws: h.ws, tool: "test", lease: l}
	root := l.Sandbox.Workdir
	content := func(s string) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(s)), nil }
	}
	b := &uploadBatch{c: c, r: newPathResolver(c, root, l.Client), items: []uploadItem{
		{dest: path.Join(root, "keep.txt"), shown: "keep.txt", open: content("new")},
		{dest: path.Join(root, "newdir/sub/a.txt"), shown: "newdir/sub/a.txt", open: content("a")},
		{dest: path.Join(root, "newdir/b.txt"), shown: "newdir/b.txt", open: func() (io.ReadCloser, error) { return nil, errors.New("disk on fire") }},
	}}
	_, err := b.run(context.Background())
	if err == nil {
		t.Fatal("batch succeeded")
	}
	mustContain(t, err.Error(), "newdir/b.txt", "nothing was changed", "disk on fire")
	if got := string(h.sbRead("keep.txt")); got != "old" {
		t.Errorf("keep.txt = %q", got)
	}
	if h.sbExists("newdir") {
		t.Error("newdir was left behind")
	}
	entries, err := l.Client.ListDir(context.Background(), root, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name, tmpMarker) {
			t.Errorf("temporary left: %s", e.Name)
		}
	}

	// A rename failing after an earlier one succeeded says which files were
	// written (a name too long for the file system fails only at the rename).
	long := strings.Repeat("x", 300)
	b = &uploadBatch{c: c, r: newPathResolver(c, root, l.Client), fresh: true, items: []uploadItem{
		{dest: path.Join(root, "p/first.txt"), shown: "p/first.txt", open: content("1")},
		{dest: path.Join(root, "p", long), shown: "p/" + long, open: content("2")},
	}}
	_, err = b.run(context.Background())
	if err == nil {
		t.Fatal("batch with an overlong name succeeded")
	}
	mustContain(t, err.Error(), "already written (p/first.txt)")
}

func TestPutFilesCap(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{MaxPutBytes: 100}})
	text := h.fail("put_files", map[string]any{"files": []map[string]any{
		{"path": "a", "content": strings.Repeat("a", 60)},
		{"path": "b", "content": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 60)), "encoding": "base64"},
	}})
	mustContain(t, text, "100 bytes", "files[1]")
	if h.sbExists("a") {
		t.Error("a was written by a refused batch")
	}
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "a", "content": strings.Repeat("a", 100)}}}, nil)
}

func TestPutFilesBadArguments(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbRun("ln", "-s", "/etc", "etclink")
	for name, args := range map[string]any{
		"missing files":    map[string]any{},
		"empty files":      map[string]any{"files": []any{}},
		"missing content":  map[string]any{"files": []map[string]any{{"path": "a"}}},
		"wrong type":       map[string]any{"files": "a.txt"},
		"unknown field":    map[string]any{"files": []map[string]any{{"path": "a", "content": "x", "owner": "root"}}},
		"bad encoding":     map[string]any{"files": []map[string]any{{"path": "a", "content": "x", "encoding": "hex"}}},
		"symlink outside":  map[string]any{"files": []map[string]any{{"path": "etclink/evil", "content": "x"}}},
		"trailing slash":   map[string]any{"files": []map[string]any{{"path": "dir/", "content": "x"}}},
		"mode not octal":   map[string]any{"files": []map[string]any{{"path": "a", "content": "x", "mode": "rwx"}}},
		"mode too long":    map[string]any{"files": []map[string]any{{"path": "a", "content": "x", "mode": "00755"}}},
		"unknown argument": map[string]any{"files": []map[string]any{{"path": "a", "content": "x"}}, "force": true},
	} {
		t.Run(name, func(t *testing.T) {
			text := h.fail("put_files", args)
			if name == "symlink outside" {
				mustContain(t, text, "etclink", "outside the workspace")
			}
		})
	}
	if h.sbExists("a") {
		t.Error("a refused call wrote a")
	}
}

func TestDecodeContent(t *testing.T) {
	raw := []byte{0xfb, 0xff, 0xbf, 0x00, 'x'}
	for _, enc := range []string{
		base64.StdEncoding.EncodeToString(raw),
		base64.RawStdEncoding.EncodeToString(raw),
		base64.URLEncoding.EncodeToString(raw),
		base64.RawURLEncoding.EncodeToString(raw),
		"+/+/\nAHg=\n",
	} {
		got, err := decodeContent("files[0]", enc, "base64")
		if err != nil || !bytes.Equal(got, raw) {
			t.Errorf("decode %q = %v, %v", enc, got, err)
		}
	}
	for _, mode := range []string{"755", "0755", "0o755", "4755"} {
		if _, err := parseMode("m", mode); err != nil {
			t.Errorf("parseMode(%q): %v", mode, err)
		}
	}
	for _, mode := range []string{"", "75", "0x755", "8888", "07777777", "-755"} {
		if _, err := parseMode("m", mode); err == nil {
			t.Errorf("parseMode(%q) accepted", mode)
		}
	}
}

func TestReadFilesRanges(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("digits.txt", "0123456789")
	f := readOne(h, map[string]any{"paths": []string{"digits.txt"}, "offset": 3, "limit": 4})
	if f.Content != "3456" || f.Encoding != "text" || f.Size != 10 || f.Offset != 3 || f.Bytes != 4 || !f.Truncated || f.NextOffset == nil || *f.NextOffset != 7 {
		t.Errorf("range read = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"digits.txt"}, "offset": 7}); f.Content != "789" || f.Truncated || f.NextOffset != nil {
		t.Errorf("tail read = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"digits.txt"}, "offset": 50}); f.Content != "" || f.Bytes != 0 || !strings.Contains(f.Note, "past the end") {
		t.Errorf("read past the end = %+v", f)
	}
	// A multi-byte character cut by the limit is left for the next read.
	h.sbWrite("utf8.txt", "aé!")
	if f := readOne(h, map[string]any{"paths": []string{"utf8.txt"}, "limit": 2}); f.Content != "a" || f.Encoding != "text" || f.Bytes != 1 || *f.NextOffset != 1 {
		t.Errorf("cut rune read = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"utf8.txt"}, "offset": 1}); f.Content != "é!" {
		t.Errorf("continued read = %+v", f)
	}
	// An empty file.
	h.sbWrite("empty.txt", "")
	if f := readOne(h, map[string]any{"paths": []string{"empty.txt"}}); f.Content != "" || f.Size != 0 || f.Truncated {
		t.Errorf("empty read = %+v", f)
	}
}

func TestReadFilesLines(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("lines.txt", "one\ntwo\nthree\nfour\nfive")
	f := readOne(h, map[string]any{"paths": []string{"lines.txt"}, "start_line": 2, "max_lines": 2})
	if f.Content != "two\nthree\n" || f.StartLine != 2 || f.Lines != 2 || f.NextLine != 4 || f.Offset != 4 || !f.Truncated || *f.NextOffset != 14 {
		t.Errorf("lines 2-3 = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"lines.txt"}, "start_line": 4}); f.Content != "four\nfive" || f.Lines != 2 || f.Truncated || f.NextLine != 0 {
		t.Errorf("lines 4- = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"lines.txt"}, "max_lines": 1}); f.Content != "one\n" || f.StartLine != 1 || f.NextLine != 2 {
		t.Errorf("first line = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"lines.txt"}, "start_line": 9}); f.Content != "" || !strings.Contains(f.Note, "has 5 line(s)") {
		t.Errorf("past the last line = %+v", f)
	}
	mustContain(t, h.fail("read_files", map[string]any{"paths": []string{"lines.txt"}, "offset": 3, "start_line": 2}), "offset", "not both")

	// A long file: memory is bounded by the cap, and the cap cuts lines.
	long := strings.Repeat("0123456789abcdef\n", 20000) // 340000 bytes
	h.sbWrite("long.txt", long)
	if f := readOne(h, map[string]any{"paths": []string{"long.txt"}, "start_line": 19999, "max_lines": 5}); f.Content != "0123456789abcdef\n0123456789abcdef\n" || f.Lines != 2 || f.Truncated {
		t.Errorf("tail lines of a long file = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"long.txt"}, "start_line": 2, "limit": 20}); f.Bytes != 20 || f.Lines != 2 || f.NextLine != 0 || !f.Truncated || *f.NextOffset != 17+20 || !strings.Contains(f.Note, "cut line 3") {
		t.Errorf("capped line read = %+v", f)
	}
	if f := readOne(h, map[string]any{"paths": []string{"long.txt"}, "start_line": 2, "limit": 34}); f.Lines != 2 || f.NextLine != 4 || !f.Truncated {
		t.Errorf("line read capped at a line boundary = %+v", f)
	}
}

func TestReadFilesCaps(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{MaxReadBytes: 16}})
	h.sbWrite("a.txt", strings.Repeat("a", 40))
	h.sbWrite("b.txt", strings.Repeat("b", 10))
	h.sbWrite("c.txt", "c")
	out, res := okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"b.txt", "a.txt", "c.txt"}})
	if f := out.Files[0]; f.Content != strings.Repeat("b", 10) || f.Truncated {
		t.Errorf("b = %+v", f)
	}
	if f := out.Files[1]; f.Bytes != 6 || !f.Truncated || *f.NextOffset != 6 {
		t.Errorf("a (cut by the call cap) = %+v", f)
	}
	if f := out.Files[2]; f.Bytes != 0 || !f.Truncated || *f.NextOffset != 0 || !strings.Contains(f.Note, "read cap of 16 bytes") {
		t.Errorf("c (no budget left) = %+v", f)
	}
	if out.Bytes != 16 {
		t.Errorf("total bytes = %d, want 16", out.Bytes)
	}
	mustContain(t, resultText(res), "NOTICE:", "read caps")

	out, res = okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"a.txt"}, "limit": 1000})
	mustContain(t, resultText(res), "limit 1000 was lowered", "16 bytes")
	if out.Files[0].Bytes != 16 {
		t.Errorf("clamped read = %+v", out.Files[0])
	}
}

func TestReadFilesEncodings(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	bin := []byte{'a', 0, 'b', 0xff}
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "bin.dat", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"},
		{"path": "latin1.txt", "content": base64.StdEncoding.EncodeToString([]byte("caf\xe9")), "encoding": "base64"},
	}}, nil)
	out, _ := okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"bin.dat", "latin1.txt"}})
	for _, f := range out.Files {
		raw, err := base64.StdEncoding.DecodeString(f.Content)
		if f.Encoding != "base64" || err != nil {
			t.Errorf("%s: encoding %s (%v), want base64", f.Path, f.Encoding, err)
		}
		if f.Path == "bin.dat" && !bytes.Equal(raw, bin) {
			t.Errorf("bin.dat = %v", raw)
		}
	}
	out, res := okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"latin1.txt"}, "encoding": "text"})
	if f := out.Files[0]; f.Content != "caf\uFFFD" || !f.InvalidUTF8 || f.Encoding != "text" {
		t.Errorf("forced text = %+v", f)
	}
	mustContain(t, resultText(res), "U+FFFD")
	if f := readOne(h, map[string]any{"paths": []string{"bin.dat"}, "encoding": "text"}); !f.InvalidUTF8 {
		t.Errorf("forced text of binary = %+v", f)
	}
	h.sbWrite("plain.txt", "plain")
	if f := readOne(h, map[string]any{"paths": []string{"plain.txt"}, "encoding": "base64"}); f.Encoding != "base64" || f.Content != base64.StdEncoding.EncodeToString([]byte("plain")) {
		t.Errorf("forced base64 = %+v", f)
	}
}

func TestReadFilesImage(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	data := base64.StdEncoding.EncodeToString(buf.Bytes())
	h.sbWrite("note.txt", "text")
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "pic.png", "content": data, "encoding": "base64"}}}, nil)
	out, res := okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"note.txt", "pic.png"}})
	f := out.Files[1]
	if f.Encoding != "image" || f.MimeType != "image/png" || f.Content != "" || f.Bytes != int64(buf.Len()) || f.Size != int64(buf.Len()) {
		t.Errorf("image entry = %+v", f)
	}
	imgs := imageContents(res)
	if len(imgs) != 1 || imgs[0].MIMEType != "image/png" || imgs[0].Data != data {
		t.Fatalf("image content = %+v", imgs)
	}
	// Larger than the cap: base64 pieces with a note, no image.
	h2 := newHarness(t, harnessOptions{config: Config{MaxReadBytes: 32}})
	h2.ok("put_files", map[string]any{"files": []map[string]any{{"path": "pic.png", "content": data, "encoding": "base64"}}}, nil)
	out, res = okAs[readFilesOutput](h2, "read_files", map[string]any{"paths": []string{"pic.png"}})
	if f := out.Files[0]; f.Encoding != "base64" || !f.Truncated || !strings.Contains(f.Note, "image/png image") || len(imageContents(res)) != 0 {
		t.Errorf("capped image = %+v", f)
	}
}

func TestReadFilesErrors(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("good.txt", "good")
	h.sbRun("mkdir", "adir")
	h.sbRun("ln", "-s", "/etc/passwd", "passwd")
	out, _ := okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"good.txt", "missing.txt", "../x", "/etc/passwd", "a\x00b", "passwd", "adir"}})
	if out.Files[0].Content != "good" || out.Files[0].Error != "" {
		t.Errorf("good.txt = %+v", out.Files[0])
	}
	wants := []string{"", "does not exist", "leaves the workspace", "outside the workspace", "NUL", `"passwd" resolves (through a symlink) outside the workspace`, "is a directory"}
	for i, w := range wants[1:] {
		f := out.Files[i+1]
		if !strings.Contains(f.Error, w) || f.Content != "" {
			t.Errorf("paths[%d] %q: error %q, want it to contain %q", i+1, f.Path, f.Error, w)
		}
	}
	// All failing: isError, naming the reason.
	mustContain(t, h.fail("read_files", map[string]any{"paths": []string{"missing.txt"}}), "Not found", `"missing.txt" does not exist`)
	mustContain(t, h.fail("read_files", map[string]any{"paths": []string{"passwd"}}), "passwd", "outside the workspace", "refused")
	mustContain(t, h.fail("read_files", map[string]any{"paths": []string{"missing.txt", "../y"}}), "none of the 2 files", "missing.txt", "../y")
	// Schema-level mistakes.
	h.fail("read_files", map[string]any{})
	h.fail("read_files", map[string]any{"paths": "good.txt"})
	h.fail("read_files", map[string]any{"paths": []string{"good.txt"}, "offset": -1})
	h.fail("read_files", map[string]any{"paths": []string{"good.txt"}, "encoding": "hex"})
	h.fail("read_files", map[string]any{"paths": []string{"good.txt"}, "lines": 3})
}

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
	if len(out.Entries) != 2 || !out.Truncated || out.Total != 9 {
		t.Errorf("truncated listing: %d entries, total %d, truncated %v: %v", len(out.Entries), out.Total, out.Truncated, paths(out))
	}
	mustContain(t, resultText(res), "NOTICE:", "2 of 9")
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

func TestImageType(t *testing.T) {
	for in, want := range map[string]string{
		"\x89PNG\r\n\x1a\nrest":        "image/png",
		"\xff\xd8\xff\xe0JFIF":         "image/jpeg",
		"GIF87a..":                     "image/gif",
		"GIF89a..":                     "image/gif",
		"RIFF\x00\x00\x00\x00WEBPVP8 ": "image/webp",
		"RIFF\x00\x00\x00\x00WAVEfmt ": "",
		"\x89PNG":                      "",
		"plain text":                   "",
	} {
		if got := imageType([]byte(in)); got != want {
			t.Errorf("imageType(%q) = %q, want %q", in, got, want)
		}
	}
}
