//go:build linux

package fsrpc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/keepalive"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem/filesystemconnect"
)

const (
	evCreate = filesystem.EventType_EVENT_TYPE_CREATE
	evWrite  = filesystem.EventType_EVENT_TYPE_WRITE
	evRemove = filesystem.EventType_EVENT_TYPE_REMOVE
	evRename = filesystem.EventType_EVENT_TYPE_RENAME
	evChmod  = filesystem.EventType_EVENT_TYPE_CHMOD
)

type evKey struct {
	name string
	typ  filesystem.EventType
}

func (k evKey) String() string { return fmt.Sprintf("%s %s", k.typ, k.name) }

func keyOf(ev *filesystem.FilesystemEvent) evKey { return evKey{ev.GetName(), ev.GetType()} }

// watchStream opens a WatchDir stream and checks that start{} comes first.
func watchStream(t *testing.T, c filesystemconnect.FilesystemClient, msg *filesystem.WatchDirRequest, interval string) *connect.ServerStreamForClient[filesystem.WatchDirResponse] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	req := connect.NewRequest(msg)
	if interval != "" {
		req.Header().Set(keepalive.Header, interval)
	}
	stream, err := c.WatchDir(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		stream.Close()
	})
	if !stream.Receive() {
		t.Fatalf("stream ended before start: %v", stream.Err())
	}
	if stream.Msg().GetStart() == nil {
		t.Fatalf("first message %v, want start", stream.Msg())
	}
	return stream
}

// collectUntil reads filesystem events until one equal to stop, returning
// all of them (stop included). Keepalives are skipped.
func collectUntil(t *testing.T, stream *connect.ServerStreamForClient[filesystem.WatchDirResponse], stop evKey) []*filesystem.FilesystemEvent {
	t.Helper()
	var got []*filesystem.FilesystemEvent
	for stream.Receive() {
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		got = append(got, ev)
		if keyOf(ev) == stop {
			return got
		}
	}
	t.Fatalf("stream ended (%v) before %v; got %v", stream.Err(), stop, keys(got))
	return nil
}

func keys(evs []*filesystem.FilesystemEvent) []evKey {
	out := make([]evKey, len(evs))
	for i, ev := range evs {
		out[i] = keyOf(ev)
	}
	return out
}

// wantSubsequence fails unless want appears in got in order.
func wantSubsequence(t *testing.T, got []*filesystem.FilesystemEvent, want ...evKey) {
	t.Helper()
	i := 0
	for _, ev := range got {
		if i < len(want) && keyOf(ev) == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("events %v lack %v (in order %v)", keys(got), want[i], want)
	}
}

func find(evs []*filesystem.FilesystemEvent, k evKey) *filesystem.FilesystemEvent {
	for _, ev := range evs {
		if keyOf(ev) == k {
			return ev
		}
	}
	return nil
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestWatchDir covers CREATE/WRITE/CHMOD/RENAME/REMOVE, include_entry and
// recursion into a subdirectory created after the watch started.
func TestWatchDir(t *testing.T) {
	e := newEnv(t)
	e.each(t, func(t *testing.T, c namedClient) {
		dir := e.path(c.name)
		mkdir(t, dir)
		stream := watchStream(t, c, &filesystem.WatchDirRequest{Path: c.name, Recursive: true, IncludeEntry: true}, "")

		writeFile(t, filepath.Join(dir, "f"), "1")
		appendFile(t, filepath.Join(dir, "f"), "2")
		if err := os.Chmod(filepath.Join(dir, "f"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "g")); err != nil {
			t.Fatal(err)
		}
		got := collectUntil(t, stream, evKey{"g", evRemove})
		wantSubsequence(t, got,
			evKey{"f", evCreate}, evKey{"f", evWrite}, evKey{"f", evChmod},
			evKey{"f", evRename}, evKey{"g", evCreate}, evKey{"g", evRemove})

		for _, k := range []evKey{{"f", evRename}, {"g", evRemove}} {
			if en := find(got, k).GetEntry(); en != nil {
				t.Fatalf("%v carries an entry: %v", k, en)
			}
		}

		// include_entry: entries on CREATE, WRITE and CHMOD. The entry is
		// read when the event is handled, so the file must still be there.
		h := filepath.Join(dir, "h")
		writeFile(t, h, "h")
		got = collectUntil(t, stream, evKey{"h", evCreate})
		if en := got[len(got)-1].GetEntry(); en.GetPath() != h || en.GetType() != filesystem.FileType_FILE_TYPE_FILE {
			t.Fatalf("CREATE entry = %v", en)
		}
		if err := os.Chmod(h, 0o600); err != nil {
			t.Fatal(err)
		}
		got = collectUntil(t, stream, evKey{"h", evChmod})
		if en := got[len(got)-1].GetEntry(); en.GetMode() != 0o600 {
			t.Fatalf("CHMOD entry = %v", en)
		}
		appendFile(t, h, "more")
		got = collectUntil(t, stream, evKey{"h", evWrite})
		if en := got[len(got)-1].GetEntry(); en.GetPath() != h {
			t.Fatalf("WRITE entry = %v", en)
		}

		// Recursive: a subdirectory created now is watched before its CREATE
		// event is delivered.
		mkdir(t, filepath.Join(dir, "sub"))
		collectUntil(t, stream, evKey{"sub", evCreate})
		writeFile(t, filepath.Join(dir, "sub", "x"), "x")
		got = collectUntil(t, stream, evKey{"sub/x", evCreate})
		if en := got[len(got)-1].GetEntry(); en.GetPath() != filepath.Join(dir, "sub", "x") {
			t.Fatalf("sub/x entry = %v", en)
		}
	})
}

func TestWatchDirNotRecursive(t *testing.T) {
	e := newEnv(t)
	mkdir(t, e.path("w/old"))
	stream := watchStream(t, e.clients[0], &filesystem.WatchDirRequest{Path: "w"}, "")
	mkdir(t, e.path("w/sub"))
	writeFile(t, e.path("w/sub/x"), "x")
	writeFile(t, e.path("w/old/y"), "y")
	writeFile(t, e.path("w/marker"), "m")
	got := collectUntil(t, stream, evKey{"marker", evCreate})
	wantSubsequence(t, got, evKey{"sub", evCreate}, evKey{"marker", evCreate})
	for _, ev := range got {
		if ev.GetName() == "sub/x" || ev.GetName() == "old/y" {
			t.Fatalf("non-recursive watch reported %v", keyOf(ev))
		}
		if ev.GetEntry() != nil {
			t.Fatalf("entry without include_entry: %v", ev)
		}
	}
}

// TestWatchDirNestedCreate: mkdir -p creates several levels at once; each
// level is reported even if it appeared before its parent was watched.
func TestWatchDirNestedCreate(t *testing.T) {
	e := newEnv(t)
	mkdir(t, e.path("w"))
	stream := watchStream(t, e.clients[1], &filesystem.WatchDirRequest{Path: "w", Recursive: true}, "")
	writeFile(t, e.path("w/a/b/c/f"), "f")
	got := collectUntil(t, stream, evKey{"a/b/c/f", evCreate})
	wantSubsequence(t, got, evKey{"a", evCreate}, evKey{"a/b", evCreate}, evKey{"a/b/c", evCreate}, evKey{"a/b/c/f", evCreate})
}

// TestWatchDirMovedSubdir: renaming a watched subdirectory is one RENAME, and
// the directory keeps being watched under its new name.
func TestWatchDirMovedSubdir(t *testing.T) {
	e := newEnv(t)
	mkdir(t, e.path("w/sub/deep"))
	stream := watchStream(t, e.clients[0], &filesystem.WatchDirRequest{Path: "w", Recursive: true}, "")
	if err := os.Rename(e.path("w/sub"), e.path("w/moved")); err != nil {
		t.Fatal(err)
	}
	got := collectUntil(t, stream, evKey{"moved", evCreate})
	writeFile(t, e.path("w/moved/deep/x"), "x")
	writeFile(t, e.path("w/marker"), "m")
	got = append(got, collectUntil(t, stream, evKey{"marker", evCreate})...)
	wantSubsequence(t, got, evKey{"sub", evRename}, evKey{"moved", evCreate}, evKey{"moved/deep/x", evCreate}, evKey{"marker", evCreate})
	renames := 0
	for _, ev := range got {
		if keyOf(ev) == (evKey{"sub", evRename}) {
			renames++
		}
		if ev.GetName() == "sub/deep/x" {
			t.Fatalf("event under the old name: %v", keys(got))
		}
	}
	if renames != 1 {
		t.Fatalf("%d RENAME events for sub, want 1: %v", renames, keys(got))
	}
}

// TestWatchDirThroughSymlink: a watched path that is a symlink to a
// directory is followed, recursion included.
func TestWatchDirThroughSymlink(t *testing.T) {
	e := newEnv(t)
	mkdir(t, e.path("real/sub"))
	if err := os.Symlink("real", e.path("link")); err != nil {
		t.Fatal(err)
	}
	stream := watchStream(t, e.clients[0], &filesystem.WatchDirRequest{Path: "link", Recursive: true}, "")
	writeFile(t, e.path("real/sub/x"), "x")
	collectUntil(t, stream, evKey{"sub/x", evCreate})
}

func TestWatchDirKeepalive(t *testing.T) {
	e := newEnv(t)
	e.each(t, func(t *testing.T, c namedClient) {
		stream := watchStream(t, c, &filesystem.WatchDirRequest{Path: ""}, "1")
		if !stream.Receive() {
			t.Fatalf("stream ended: %v", stream.Err())
		}
		if stream.Msg().GetKeepalive() == nil {
			t.Fatalf("got %v, want keepalive", stream.Msg())
		}
	})
}

// TestWatchDirRootRemoved: removing the watched directory reports REMOVE "."
// and ends the stream normally.
func TestWatchDirRootRemoved(t *testing.T) {
	e := newEnv(t)
	mkdir(t, e.path("w"))
	stream := watchStream(t, e.clients[0], &filesystem.WatchDirRequest{Path: "w"}, "")
	if err := os.Remove(e.path("w")); err != nil {
		t.Fatal(err)
	}
	collectUntil(t, stream, evKey{".", evRemove})
	for stream.Receive() {
		if ev := stream.Msg().GetFilesystem(); ev != nil {
			t.Fatalf("event after the root went away: %v", ev)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream ended with %v, want a normal end", err)
	}
}

func TestWatchDirErrors(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.path("file"), "x")
	cases := []struct {
		path string
		code connect.Code
		msg  string
	}{
		{"missing", connect.CodeNotFound, e.path("missing")},
		{"file", connect.CodeInvalidArgument, e.path("file")},
		{"/etc", connect.CodePermissionDenied, "/etc"},
	}
	e.each(t, func(t *testing.T, c namedClient) {
		for _, tc := range cases {
			stream, err := c.WatchDir(ctxT(t), connect.NewRequest(&filesystem.WatchDirRequest{Path: tc.path}))
			if err == nil {
				for stream.Receive() {
					t.Fatalf("WatchDir(%s) sent %v", tc.path, stream.Msg())
				}
				err = stream.Err()
				stream.Close()
			}
			wantCode(t, err, tc.code, tc.msg)

			_, err = c.CreateWatcher(ctxT(t), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: tc.path}))
			wantCode(t, err, tc.code, tc.msg)
		}
	})
}

// pollUntil drains a polling watcher until stop shows up.
func pollUntil(t *testing.T, c filesystemconnect.FilesystemClient, id string, stop evKey) []*filesystem.FilesystemEvent {
	t.Helper()
	ctx := ctxT(t)
	var got []*filesystem.FilesystemEvent
	for {
		res, err := c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatalf("GetWatcherEvents: %v (events so far %v)", err, keys(got))
		}
		got = append(got, res.Msg.GetEvents()...)
		if slices.ContainsFunc(got, func(ev *filesystem.FilesystemEvent) bool { return keyOf(ev) == stop }) {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %v within %v; got %v", stop, testTimeout, keys(got))
		case <-time.After(5 * time.Millisecond): // polling interval, not synchronisation
		}
	}
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t)
	e.each(t, func(t *testing.T, c namedClient) {
		ctx := ctxT(t)
		dir := e.path(c.name)
		mkdir(t, dir)
		res, err := c.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: c.name, Recursive: true, IncludeEntry: true}))
		if err != nil {
			t.Fatal(err)
		}
		id := res.Msg.GetWatcherId()
		if id == "" {
			t.Fatal("empty watcher id")
		}

		writeFile(t, filepath.Join(dir, "f"), "1")
		appendFile(t, filepath.Join(dir, "f"), "2")
		if err := os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "g")); err != nil {
			t.Fatal(err)
		}
		got := pollUntil(t, c, id, evKey{"g", evRemove})
		wantSubsequence(t, got, evKey{"f", evCreate}, evKey{"f", evWrite}, evKey{"f", evRename}, evKey{"g", evCreate}, evKey{"g", evRemove})

		mkdir(t, filepath.Join(dir, "sub"))
		pollUntil(t, c, id, evKey{"sub", evCreate})
		writeFile(t, filepath.Join(dir, "sub", "x"), "x")
		got = pollUntil(t, c, id, evKey{"sub/x", evCreate})
		if en := find(got, evKey{"sub/x", evCreate}).GetEntry(); en.GetPath() != filepath.Join(dir, "sub", "x") {
			t.Fatalf("CREATE entry = %v", en)
		}

		if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		wantCode(t, err, connect.CodeNotFound, fmt.Sprintf("watcher with id '%s' not found", id))
		_, err = c.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id}))
		wantCode(t, err, connect.CodeNotFound, id)
		_, err = c.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: "nope"}))
		wantCode(t, err, connect.CodeNotFound, "watcher with id 'nope' not found")
	})
}

// TestServiceClose: Close ends open streams normally, drops polling
// watchers, refuses new watches and is safe twice.
func TestServiceClose(t *testing.T) {
	e := newEnv(t)
	c := e.clients[0]
	stream := watchStream(t, c, &filesystem.WatchDirRequest{Path: ""}, "")
	res, err := c.CreateWatcher(ctxT(t), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: ""}))
	if err != nil {
		t.Fatal(err)
	}
	e.svc.Close()
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream ended with %v, want a normal end", err)
	}
	_, err = c.GetWatcherEvents(ctxT(t), connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: res.Msg.GetWatcherId()}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = c.CreateWatcher(ctxT(t), connect.NewRequest(&filesystem.CreateWatcherRequest{Path: ""}))
	wantCode(t, err, connect.CodeUnavailable)
	e.svc.Close()
	// Plain RPCs keep working.
	if _, err := c.Stat(ctxT(t), connect.NewRequest(&filesystem.StatRequest{})); err != nil {
		t.Fatal(err)
	}
}
