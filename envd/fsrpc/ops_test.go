//go:build linux

package fsrpc_test

import (
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

func TestTransports(t *testing.T) {
	e := newEnv(t)
	want := map[string]string{"binary-h2c": "HTTP/2.0", "json-http1": "HTTP/1.1"}
	e.each(t, func(t *testing.T, c namedClient) {
		if _, err := c.Stat(ctxT(t), connect.NewRequest(&filesystem.StatRequest{Path: ""})); err != nil {
			t.Fatal(err)
		}
		if got := e.lastProto.Load(); got != want[c.name] {
			t.Fatalf("server saw %v, want %s", got, want[c.name])
		}
	})
}

func TestStat(t *testing.T) {
	e := newEnv(t)
	file := e.path("sub/file.txt")
	writeFile(t, file, "hello")
	if err := os.Chmod(file, 0o640); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := os.Chtimes(file, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/file.txt", e.path("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", e.path("escape")); err != nil {
		t.Fatal(err)
	}
	owner := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	group := strconv.Itoa(os.Getgid())
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}

	e.each(t, func(t *testing.T, c namedClient) {
		ctx := ctxT(t)
		// A relative path resolves against the root.
		res, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "sub/file.txt"}))
		if err != nil {
			t.Fatal(err)
		}
		got := res.Msg.GetEntry()
		if got.GetName() != "file.txt" || got.GetPath() != file || got.GetType() != filesystem.FileType_FILE_TYPE_FILE {
			t.Fatalf("entry = %v", got)
		}
		if got.GetSize() != 5 || got.GetMode() != 0o640 || got.GetPermissions() != "-rw-r-----" {
			t.Fatalf("size/mode/permissions = %d/%o/%s", got.GetSize(), got.GetMode(), got.GetPermissions())
		}
		if got.GetOwner() != owner || got.GetGroup() != group {
			t.Fatalf("owner/group = %s/%s, want %s/%s", got.GetOwner(), got.GetGroup(), owner, group)
		}
		if !got.GetModifiedTime().AsTime().Equal(mtime) {
			t.Fatalf("modified_time = %v, want %v", got.GetModifiedTime().AsTime(), mtime)
		}
		if got.SymlinkTarget != nil {
			t.Fatalf("symlink_target set on a file: %q", got.GetSymlinkTarget())
		}
		if md := got.GetMetadata(); len(md) != 0 {
			t.Fatalf("metadata of a file without any = %v", md)
		}

		res, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: e.path("sub")}))
		if err != nil {
			t.Fatal(err)
		}
		if d := res.Msg.GetEntry(); d.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY || d.GetPermissions() != "drwxr-xr-x" || d.GetMode() != 0o755 {
			t.Fatalf("dir entry = %v", d)
		}

		// Lstat semantics: the link itself, with its resolved target.
		res, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "link"}))
		if err != nil {
			t.Fatal(err)
		}
		if l := res.Msg.GetEntry(); l.GetType() != filesystem.FileType_FILE_TYPE_SYMLINK || l.GetSymlinkTarget() != file || l.GetPermissions()[0] != 'L' {
			t.Fatalf("link entry = %v", l)
		}

		// The root itself ("" means the root).
		res, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if r := res.Msg.GetEntry(); r.GetPath() != e.root || r.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY {
			t.Fatalf("root entry = %v", r)
		}

		_, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "missing"}))
		wantCode(t, err, connect.CodeNotFound, "file not found: "+e.path("missing"))
		_, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/etc/passwd"}))
		wantCode(t, err, connect.CodePermissionDenied, "/etc/passwd")
		_, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "../outside"}))
		wantCode(t, err, connect.CodePermissionDenied, "../outside")
		_, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "escape"}))
		wantCode(t, err, connect.CodePermissionDenied, "escape")
		_, err = c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "~nobody/x"}))
		wantCode(t, err, connect.CodeInvalidArgument, "~nobody/x")
	})
}

func TestMakeDir(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.path("file"), "x")
	e.each(t, func(t *testing.T, c namedClient) {
		ctx := ctxT(t)
		dir := c.name + "/a/b/c"
		res, err := c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: dir}))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Msg.GetEntry(); got.GetPath() != e.path(dir) || got.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY || got.GetName() != "c" {
			t.Fatalf("entry = %v", got)
		}
		if info, err := os.Stat(e.path(dir)); err != nil || !info.IsDir() {
			t.Fatalf("directory not created: %v", err)
		}
		_, err = c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: dir}))
		wantCode(t, err, connect.CodeAlreadyExists, e.path(dir))
		_, err = c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "file"}))
		wantCode(t, err, connect.CodeInvalidArgument, e.path("file"))
		_, err = c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "file/below"}))
		wantCode(t, err, connect.CodeInvalidArgument, e.path("file"))
		_, err = c.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/tmp/fsrpc-outside"}))
		wantCode(t, err, connect.CodePermissionDenied, "/tmp/fsrpc-outside")
	})
}

// TestMakeDirOwnership: as root, a directory made for another user, and the
// parents created for it, belong to that user.
func TestMakeDirOwnership(t *testing.T) {
	testenv.RequireRoot(t)
	nobody := testenv.RequireUser(t, "nobody")
	e := newEnv(t)
	if err := os.Mkdir(e.path("existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := e.clients[0].withBasic("nobody")
	if _, err := c.MakeDir(ctxT(t), connect.NewRequest(&filesystem.MakeDirRequest{Path: "existing/p/q"})); err != nil {
		t.Fatal(err)
	}
	for rel, wantUID := range map[string]string{"existing": "0", "existing/p": nobody.Uid, "existing/p/q": nobody.Uid} {
		info, err := os.Stat(e.path(rel))
		if err != nil {
			t.Fatal(err)
		}
		if uid := strconv.Itoa(int(info.Sys().(*syscall.Stat_t).Uid)); uid != wantUID {
			t.Errorf("%s owned by uid %s, want %s", rel, uid, wantUID)
		}
	}
}

func TestMove(t *testing.T) {
	e := newEnv(t)
	e.each(t, func(t *testing.T, c namedClient) {
		ctx := ctxT(t)
		src := e.path(c.name + "/src.txt")
		writeFile(t, src, "payload")
		dst := c.name + "/new/parent/dst.txt"
		res, err := c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: src, Destination: dst}))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Msg.GetEntry(); got.GetPath() != e.path(dst) || got.GetName() != "dst.txt" || got.GetSize() != 7 {
			t.Fatalf("entry = %v", got)
		}
		if _, err := os.Lstat(src); !os.IsNotExist(err) {
			t.Fatalf("source still there: %v", err)
		}
		if b, err := os.ReadFile(e.path(dst)); err != nil || string(b) != "payload" {
			t.Fatalf("destination content %q, %v", b, err)
		}

		// A directory moves with its contents.
		writeFile(t, e.path(c.name+"/tree/x"), "x")
		if _, err := c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: c.name + "/tree", Destination: c.name + "/moved"})); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(e.path(c.name + "/moved/x")); err != nil {
			t.Fatal(err)
		}

		_, err = c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "nope", Destination: "x"}))
		wantCode(t, err, connect.CodeNotFound, e.path("nope"))
		_, err = c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: dst, Destination: "/tmp/fsrpc-out"}))
		wantCode(t, err, connect.CodePermissionDenied, "/tmp/fsrpc-out")
		_, err = c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "/etc/hostname", Destination: "in"}))
		wantCode(t, err, connect.CodePermissionDenied, "/etc/hostname")
	})
}

// entryPaths lists the paths of entries relative to root.
func entryPaths(t *testing.T, root string, entries []*filesystem.EntryInfo) []string {
	t.Helper()
	out := make([]string, 0, len(entries))
	for _, en := range entries {
		rel, err := filepath.Rel(root, en.GetPath())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rel)
	}
	return out
}

func TestListDir(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.path("top/a.txt"), "a")
	writeFile(t, e.path("top/d/b.txt"), "b")
	writeFile(t, e.path("top/d/e/c.txt"), "c")
	if err := os.Symlink("d", e.path("top/link-d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("top/d", e.path("via-link")); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		path  string
		depth uint32
		want  []string
	}{
		{"top", 0, []string{"top/a.txt", "top/d", "top/link-d"}},
		{"top", 1, []string{"top/a.txt", "top/d", "top/link-d"}},
		// Nested symlinks are listed, not followed.
		{"top", 2, []string{"top/a.txt", "top/d", "top/d/b.txt", "top/d/e", "top/link-d"}},
		{"top", 3, []string{"top/a.txt", "top/d", "top/d/b.txt", "top/d/e", "top/d/e/c.txt", "top/link-d"}},
		// A symlink given as the path is followed; paths stay under it.
		{"via-link", 1, []string{"via-link/b.txt", "via-link/e"}},
	}
	e.each(t, func(t *testing.T, c namedClient) {
		ctx := ctxT(t)
		for _, tc := range cases {
			res, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: tc.path, Depth: tc.depth}))
			if err != nil {
				t.Fatalf("ListDir(%s, %d): %v", tc.path, tc.depth, err)
			}
			if got := entryPaths(t, e.root, res.Msg.GetEntries()); !slices.Equal(got, tc.want) {
				t.Fatalf("ListDir(%s, %d) = %v, want %v", tc.path, tc.depth, got, tc.want)
			}
		}
		res, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "top"}))
		if err != nil {
			t.Fatal(err)
		}
		types := map[string]filesystem.FileType{}
		for _, en := range res.Msg.GetEntries() {
			types[en.GetName()] = en.GetType()
		}
		if types["a.txt"] != filesystem.FileType_FILE_TYPE_FILE || types["d"] != filesystem.FileType_FILE_TYPE_DIRECTORY || types["link-d"] != filesystem.FileType_FILE_TYPE_SYMLINK {
			t.Fatalf("types = %v", types)
		}

		_, err = c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "top/a.txt"}))
		wantCode(t, err, connect.CodeInvalidArgument, e.path("top/a.txt"))
		_, err = c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "missing"}))
		wantCode(t, err, connect.CodeNotFound, e.path("missing"))
		_, err = c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/etc"}))
		wantCode(t, err, connect.CodePermissionDenied, "/etc")
	})
}

// TestListDirSymlinkLoop needs an unconfined resolver: under confinement the
// resolver itself refuses a looping path (invalid_argument) before ListDir
// sees it.
func TestListDirSymlinkLoop(t *testing.T) {
	e := newEnv(t, envOptions{unconfined: true})
	if err := os.Symlink("loop2", e.path("loop1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("loop1", e.path("loop2")); err != nil {
		t.Fatal(err)
	}
	e.each(t, func(t *testing.T, c namedClient) {
		_, err := c.ListDir(ctxT(t), connect.NewRequest(&filesystem.ListDirRequest{Path: "loop1"}))
		wantCode(t, err, connect.CodeFailedPrecondition, e.path("loop1"))
	})

	confined := newEnv(t)
	if err := os.Symlink("loop2", confined.path("loop1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("loop1", confined.path("loop2")); err != nil {
		t.Fatal(err)
	}
	_, err := confined.clients[0].ListDir(ctxT(t), connect.NewRequest(&filesystem.ListDirRequest{Path: "loop1"}))
	wantCode(t, err, connect.CodeInvalidArgument, "loop1")
}

func TestRemove(t *testing.T) {
	e := newEnv(t)
	e.each(t, func(t *testing.T, c namedClient) {
		ctx := ctxT(t)
		writeFile(t, e.path(c.name+"/f"), "x")
		writeFile(t, e.path(c.name+"/tree/a/b"), "x")
		for _, p := range []string{c.name + "/f", c.name + "/tree", c.name + "/never-existed"} {
			if _, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: p})); err != nil {
				t.Fatalf("Remove(%s): %v", p, err)
			}
			if _, err := os.Lstat(e.path(p)); !os.IsNotExist(err) {
				t.Fatalf("%s still exists: %v", p, err)
			}
		}
		_, err := c.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/etc/hostname"}))
		wantCode(t, err, connect.CodePermissionDenied, "/etc/hostname")
	})
}

// setXattr sets an extended attribute on path. A filesystem without user
// xattrs is a missing part (testenv.Missing).
func setXattr(t *testing.T, path, name string, value []byte) {
	t.Helper()
	if err := unix.Setxattr(path, name, value, 0); err != nil {
		testenv.Missing(t, "user xattrs on %s (set %s: %v): point TMPDIR at a filesystem with user xattrs (ext4, xfs, btrfs)", path, name, err)
	}
}

// Metadata is the user.e2b.* xattrs with the prefix stripped; other
// attributes are not metadata.
func TestStatMetadata(t *testing.T) {
	e := newEnv(t)
	file := e.path("file.txt")
	writeFile(t, file, "hello")
	setXattr(t, file, "user.e2b.owner-team", []byte("infra"))
	setXattr(t, file, "user.e2b.empty", nil)
	setXattr(t, file, "user.other", []byte("ignored"))
	want := map[string]string{"owner-team": "infra", "empty": ""}
	e.each(t, func(t *testing.T, c namedClient) {
		res, err := c.Stat(ctxT(t), connect.NewRequest(&filesystem.StatRequest{Path: "file.txt"}))
		if err != nil {
			t.Fatal(err)
		}
		if md := res.Msg.GetEntry().GetMetadata(); !maps.Equal(md, want) {
			t.Fatalf("metadata = %v, want %v", md, want)
		}
		list, err := c.ListDir(ctxT(t), connect.NewRequest(&filesystem.ListDirRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if entries := list.Msg.GetEntries(); len(entries) != 1 || !maps.Equal(entries[0].GetMetadata(), want) {
			t.Fatalf("ListDir entries = %v, want one with metadata %v", entries, want)
		}
	})
}

// TestInvalidUTF8Names: file names are bytes on Linux but protobuf strings
// are UTF-8; an odd name is reported with U+FFFD instead of failing the call.
func TestInvalidUTF8Names(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.path("odd/\xff.txt"), "x")
	e.each(t, func(t *testing.T, c namedClient) {
		res, err := c.ListDir(ctxT(t), connect.NewRequest(&filesystem.ListDirRequest{Path: "odd"}))
		if err != nil {
			t.Fatal(err)
		}
		entries := res.Msg.GetEntries()
		if len(entries) != 1 || entries[0].GetName() != "\uFFFD.txt" {
			t.Fatalf("entries %v", entries)
		}
	})
}

// Metadata keys and values are bytes too; invalid UTF-8 is reported with
// U+FFFD.
func TestInvalidUTF8Metadata(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.path("odd.txt"), "x")
	setXattr(t, e.path("odd.txt"), "user.e2b.bin\xff", []byte{0xfe, 'v'})
	e.each(t, func(t *testing.T, c namedClient) {
		res, err := c.Stat(ctxT(t), connect.NewRequest(&filesystem.StatRequest{Path: "odd.txt"}))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"bin\uFFFD": "\uFFFDv"}
		if md := res.Msg.GetEntry().GetMetadata(); !maps.Equal(md, want) {
			t.Fatalf("metadata = %q, want %q", md, want)
		}
	})
}
