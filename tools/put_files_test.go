//go:build linux

package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
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
		"+/+/ AH\tg",
	} {
		size, open, err := decodeContent("files[0]", enc, "base64")
		if err != nil {
			t.Errorf("decode %q: %v", enc, err)
			continue
		}
		got, err := io.ReadAll(open())
		if err != nil || !bytes.Equal(got, raw) || size != int64(len(raw)) {
			t.Errorf("decode %q = %v (size %d), %v", enc, got, size, err)
		}
	}
	for _, bad := range []string{"+/+/AHg=x", "+/+/A", "%%%%", "+/+/AHg==="} {
		if _, _, err := decodeContent("files[0]", bad, "base64"); err == nil {
			t.Errorf("decode %q accepted", bad)
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
