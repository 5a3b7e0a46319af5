//go:build linux

package envdclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

func sh(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

func newClient(t testing.TB, endpoint string, opts ...envdclient.Option) *envdclient.Client {
	t.Helper()
	c, err := envdclient.New(endpoint, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// forEachNetwork runs f against an in-process daemon on a unix socket and on
// loopback TCP.
func forEachNetwork(t *testing.T, f func(t *testing.T, d *envdtest.Daemon, c *envdclient.Client)) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			d := envdtest.Serve(t, network, daemon.Config{Env: map[string]string{"GLOBAL": "g"}})
			f(t, d, newClient(t, d.Endpoint))
		})
	}
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// exitsSoon waits, through a pidfd (an event, not a poll), for pid to exit;
// it reports false if it still runs after a generous bound.
func exitsSoon(t *testing.T, pid int) bool {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 20_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
}

// waitEnd attaches to the selected process and waits for its end event; nil
// when envd no longer knows it at all.
func waitEnd(t *testing.T, c *envdclient.Client, sel envdclient.Selector) *envdclient.Result {
	t.Helper()
	h, err := c.Connect(t.Context(), sel, envdclient.RunOptions{})
	if envdclient.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// gatedDaemon serves an in-process daemon's handler on its own socket, with
// hooks on Start (and WatchDir) calls: spawned receives once a call spawned
// its process (or watch) and sends its first bytes (envd answers the call
// with the start event), which wait until open is closed or the call ends;
// with headersFirst the response headers go out before the wait, the start
// event after it. started receives when such a handler returned, signalled
// when a SendSignal call was answered.
type gatedDaemon struct {
	endpoint     string
	headersFirst bool
	open         chan struct{}
	spawned      chan struct{}
	started      chan struct{}
	signalled    chan struct{}
}

func serveGated(t *testing.T, open, headersFirst bool) *gatedDaemon {
	t.Helper()
	d := envdtest.Serve(t, "unix", daemon.Config{})
	g := &gatedDaemon{headersFirst: headersFirst, open: make(chan struct{}),
		spawned: make(chan struct{}, 64), started: make(chan struct{}, 64), signalled: make(chan struct{}, 64)}
	if open {
		close(g.open)
	}
	h := d.D.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/process.Process/Start", "/filesystem.Filesystem/WatchDir":
			defer func() { g.started <- struct{}{} }()
			h.ServeHTTP(&gatedWriter{ResponseWriter: w, ctx: r.Context(), g: g}, r)
		case "/process.Process/SendSignal":
			defer func() { g.signalled <- struct{}{} }()
			h.ServeHTTP(w, r)
		default:
			h.ServeHTTP(w, r)
		}
	}), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	sock := filepath.Join(envdtest.ShortTempDir(t), "g")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	g.endpoint = "unix:" + sock
	return g
}

// gatedWriter holds a Start response's first bytes until the gate opens.
type gatedWriter struct {
	http.ResponseWriter
	ctx  context.Context
	g    *gatedDaemon
	once sync.Once
}

func (w *gatedWriter) wait() error {
	w.once.Do(func() {
		if w.g.headersFirst {
			w.ResponseWriter.(http.Flusher).Flush()
		}
		w.g.spawned <- struct{}{}
	})
	select {
	case <-w.g.open:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	if err := w.wait(); err != nil {
		return 0, err
	}
	return w.ResponseWriter.Write(p)
}

func (w *gatedWriter) Flush() {
	if w.wait() == nil {
		w.ResponseWriter.(http.Flusher).Flush()
	}
}

// within receives from ch, failing the test if nothing comes in a generous
// bound.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s", what)
	}
}

// assertNoProcessTagged waits (bounded) for the end of any process tagged
// tag and fails if one is still running.
func assertNoProcessTagged(t *testing.T, c *envdclient.Client, tag string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	h, err := c.Connect(ctx, envdclient.ByTag(tag), envdclient.RunOptions{})
	if envdclient.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		h.Disconnect()
		_ = c.Kill(t.Context(), envdclient.ByTag(tag))
		t.Fatalf("process tagged %s still running: %v", tag, err)
	}
	if res.Exited || res.Signal != "killed" {
		t.Fatalf("process tagged %s: %+v; want killed", tag, res)
	}
	procs, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Tag == tag {
			t.Fatalf("process %d tagged %s still listed after its end", p.Pid, tag)
		}
	}
}
