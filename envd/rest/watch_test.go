//go:build linux

package rest_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// TestUploadWatchEvents: a watcher sees an upload through POST /files as
// E2B's envd (which writes in place) reports it: CREATE for a new file and
// WRITE on the real name, for a new file and for an overwrite, and never
// the upload's temporary name. E2B's SDK waits for that WRITE.
func TestUploadWatchEvents(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: e.root}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	wantStatus(t, e.upload(t, "new.txt", "one"), http.StatusOK)
	wantStatus(t, e.upload(t, "new.txt", "two"), http.StatusOK)
	ct, body := multipartBody(t, [3]string{"file", "multi.txt", "three"})
	wantStatus(t, e.post(t, e.url("/files"), ct, body), http.StatusOK)
	// A failed upload (its destination is a directory) shows nothing.
	if err := os.Mkdir(e.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.upload(t, "dir", "x"), http.StatusBadRequest)
	if err := os.WriteFile(e.path("stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for stream.Receive() {
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		got = append(got, ev.GetType().String()+" "+ev.GetName())
		if ev.GetName() == "stop" {
			break
		}
	}
	want := []string{
		"EVENT_TYPE_CREATE new.txt", "EVENT_TYPE_WRITE new.txt",
		"EVENT_TYPE_WRITE new.txt",
		"EVENT_TYPE_CREATE multi.txt", "EVENT_TYPE_WRITE multi.txt",
		"EVENT_TYPE_CREATE dir",
		"EVENT_TYPE_CREATE stop",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEnvsShape: GET /envs answers as E2B's envd: 200, a JSON object,
// Content-Type application/json, Cache-Control no-store.
func TestEnvsShape(t *testing.T) {
	e := newEnv(t)
	res := e.get(t, e.url("/envs"))
	wantStatus(t, res, http.StatusOK)
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	if strings.TrimSpace(string(res.body)) != "{}" {
		t.Errorf("body %q, want {}", res.body)
	}
}
