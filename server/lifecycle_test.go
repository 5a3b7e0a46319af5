//go:build linux

package server

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

func TestStdioAnonymousWorkspaceKilledAtEOF(t *testing.T) {
	e := newEnv(t, envOptions{noHTTP: true})
	c, done := e.stdioClient(t, context.Background(), true)
	var w whoami
	c.ok(t, "test_whoami", nil, &w)
	if w.Key != e.srv.StdioWorkspace().Key || w.Named || !strings.HasPrefix(w.Key, "stdio:") {
		t.Fatalf("stdio call bound to %+v", w)
	}
	var out struct {
		Stdout string `json:"stdout"`
	}
	c.ok(t, "workspace_exec", map[string]any{"command": "echo over stdio"}, &out)
	if out.Stdout != "over stdio\n" {
		t.Fatalf("exec over stdio: %+v", out)
	}
	c.Close() // EOF
	if err := recv(t, done, "ServeStdio to return at EOF"); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	if slices.Contains(e.provider.Live(), w.SandboxID) {
		t.Fatal("anonymous stdio sandbox survived EOF")
	}
}

func TestStdioNamedWorkspacePausedAtEOF(t *testing.T) {
	e := newEnv(t, envOptions{noHTTP: true, workspace: tools.Workspace{Key: "stdio:ws:proj", Named: true}})
	c, done := e.stdioClient(t, context.Background(), false)
	var w whoami
	c.ok(t, "test_whoami", nil, &w)
	if w.Key != "stdio:ws:proj" || !w.Named {
		t.Fatalf("stdio call bound to %+v", w)
	}
	c.Close()
	if err := recv(t, done, "ServeStdio to return at EOF"); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	if !slices.Contains(e.provider.Live(), w.SandboxID) {
		t.Fatal("named stdio sandbox killed at EOF")
	}
	if st := e.manager.Stats(); st.Workspaces[manage.StatePaused] != 1 {
		t.Fatalf("named stdio workspace not paused: %+v", st.Workspaces)
	}
}

func TestStdioProgressAndContextEnd(t *testing.T) {
	e := newEnv(t, envOptions{noHTTP: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, done := e.stdioClient(t, ctx, true)
	for i := range 100 {
		tok := fmt.Sprintf("s%d", i)
		if _, err := c.callErr(context.Background(), "test_progress", map[string]any{"n": 3}, tok); err != nil {
			t.Fatal(err)
		}
		if got := progressValues(t, c.progress(), tok); !slices.Equal(got, []float64{1, 2, 3}) {
			t.Fatalf("call %d over stdio: progress %v", i, got)
		}
	}
	// The call in flight is cancelled when the context ends.
	go func() { _, _ = c.callErr(context.Background(), "test_block", nil, nil) }()
	recv(t, e.blocks.started, "the blocking call to start")
	cancel()
	recv(t, e.blocks.cancelled, "the blocking call to be cancelled")
	if err := recv(t, done, "ServeStdio to return when its context ends"); err != nil {
		t.Fatalf("ServeStdio after cancel: %v", err)
	}
}

func TestGracefulShutdownLetsCallsFinish(t *testing.T) {
	e := newEnv(t, envOptions{shutdownTimeout: time.Minute})
	session := e.client(t, clientOptions{legacy: true})
	stateless := e.client(t, clientOptions{})
	var ws, wn whoami
	session.ok(t, "test_whoami", nil, &ws)
	stateless.ok(t, "test_whoami", nil, &wn)
	streamEnded := e.openStream(t, session.GetSessionId())

	result := make(chan string, 1)
	go func() {
		res, err := stateless.callErr(context.Background(), "test_block", nil, nil)
		if err != nil {
			result <- "error: " + err.Error()
			return
		}
		result <- resultText(res)
	}()
	recv(t, e.blocks.started, "the blocking call to start")
	stopped := make(chan error, 1)
	go func() { stopped <- e.stop() }()
	addr := strings.TrimPrefix(e.base, "http://")
	waitFor(t, "the listener to close", func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	close(e.blocks.release)
	if got := recv(t, result, "the in-flight call to finish"); got != "released" {
		t.Fatalf("in-flight call during shutdown: %s", got)
	}
	// Returns well before the one-minute grace: the listening GET stream
	// does not hold it.
	recv(t, streamEnded, "the listening stream to end")
	if err := recv(t, stopped, "ServeHTTP to return"); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	select {
	case <-e.blocks.cancelled:
		t.Fatal("the in-flight call was cancelled")
	default:
	}
	live := e.provider.Live()
	if slices.Contains(live, ws.SandboxID) {
		t.Fatal("the session's anonymous sandbox survived shutdown")
	}
	if !slices.Contains(live, wn.SandboxID) {
		t.Fatal("the named sandbox was killed at shutdown")
	}
	if n := e.srv.sessions.count(); n != 0 {
		t.Fatalf("%d sessions after shutdown", n)
	}
}

func TestShutdownCancelsCallsAfterTimeout(t *testing.T) {
	e := newEnv(t, envOptions{shutdownTimeout: 200 * time.Millisecond})
	c := e.client(t, clientOptions{legacy: true})
	returned := make(chan struct{})
	go func() {
		_, _ = c.callErr(context.Background(), "test_block", nil, nil)
		close(returned)
	}()
	recv(t, e.blocks.started, "the blocking call to start")
	stopped := make(chan error, 1)
	go func() { stopped <- e.stop() }()
	recv(t, e.blocks.cancelled, "the in-flight call to be cancelled after the timeout")
	if err := recv(t, stopped, "ServeHTTP to return"); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	recv(t, returned, "the client call to return")
}
