//go:build linux

package tools

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
	"strconv"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

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

// numberedLines returns lines from..to, each "line N\n".
func numberedLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestReadFilesModelBudget: a read without a limit returns 2000 lines and
// says where to go on; long lines are shown cut while structuredContent
// keeps the bytes; tail reads the end; line_numbers numbers what is shown.
func TestReadFilesModelBudget(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.sbWrite("big.txt", numberedLines(1, 2500))
	out, res := okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"big.txt"}})
	f := out.Files[0]
	want := numberedLines(1, 2000)
	if f.Content != want || !f.Truncated || f.NextOffset == nil || *f.NextOffset != int64(len(want)) {
		t.Fatalf("default read: %d bytes, truncated %v, next %v", len(f.Content), f.Truncated, f.NextOffset)
	}
	mustContain(t, resultText(res), "big.txt: bytes 0-", "more: offset "+strconv.Itoa(len(want)), "showing 2000 lines")
	if f := readOne(h, map[string]any{"paths": []string{"big.txt"}, "offset": *f.NextOffset}); f.Content != numberedLines(2001, 2500) || f.Truncated {
		t.Fatalf("read on: %d bytes, truncated %v", len(f.Content), f.Truncated)
	}

	tail := readOne(h, map[string]any{"paths": []string{"big.txt"}, "tail": 3})
	if tail.Content != numberedLines(2498, 2500) || tail.Truncated {
		t.Fatalf("tail: %q", tail.Content)
	}
	_, res = okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"big.txt"}, "tail": 2, "line_numbers": true})
	if got := res.Content[1].(mcp.TextContent).Text; got != "2499\tline 2499\n2500\tline 2500\n" {
		t.Fatalf("numbered tail: %q", got)
	}
	_, res = okAs[readFilesOutput](h, "read_files", map[string]any{"paths": []string{"big.txt"}, "start_line": 10, "max_lines": 2, "line_numbers": true})
	if got := res.Content[1].(mcp.TextContent).Text; got != "10\tline 10\n11\tline 11\n" {
		t.Fatalf("numbered lines: %q", got)
	}

	long := strings.Repeat("é", 3000)
	h.sbWrite("long.txt", "short\n"+long+"\nend")
	res = h.ok("read_files", map[string]any{"paths": []string{"long.txt"}}, nil)
	shown := res.Content[1].(mcp.TextContent).Text
	if shown != "short\n"+strings.Repeat("é", 2000)+"… [line cut: 1000 more characters]\nend" {
		t.Fatalf("long line shown as %q…", shown[:40])
	}
	var raw struct {
		Files []struct {
			Content string `json:"content"`
		} `json:"files"`
	}
	decodeStructured(t, res, &raw)
	if raw.Files[0].Content != "short\n"+long+"\nend" {
		t.Fatal("structuredContent does not keep the bytes of the long line")
	}
	mustContain(t, resultText(res), "longer than 2000 characters")
	mustContain(t, h.fail("read_files", map[string]any{"paths": []string{"long.txt"}, "tail": 1, "offset": 3}), "invalid argument tail")
}
