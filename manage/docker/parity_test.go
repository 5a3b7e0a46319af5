//go:build linux

package docker

// Lifecycle parity with the local provider, through the Manager on the real
// engine: reattach after a server restart, one replacement for many
// concurrent callers, a named workspace's files across a recreation, and an
// engine that stops answering.

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
)

// server is one run of a server: a provider and a Manager on a state
// directory shared between runs.
type server struct {
	p     *Provider
	m     *manage.Manager
	store *boltstore.Store
}

// startServer starts a server on stateDir (see server); stop it with
// stop, or the test's end does.
func startServer(t *testing.T, stateDir string, mod func(*Config)) *server {
	t.Helper()
	cli := dockertest.Engine(t)
	cfg := Config{StateDir: stateDir, Image: dockertest.BusyboxImage(t, cli), EnvdBinary: envdtest.LeanBinary(t), Logger: quiet}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := boltstore.Open(stateDir, boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manage.New(manage.Options{Provider: p, Store: store, AutoRecreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{p: p, m: m, store: store}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop shuts the Manager down (named workspaces are paused) and releases
// the provider; a second stop does nothing.
func (s *server) stop(t *testing.T) {
	if s.m == nil {
		return
	}
	if err := s.m.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	_ = s.store.Close()
	_ = s.p.Close(context.Background())
	s.m = nil
}

// killAll removes every sandbox of p's owner when the test ends.
func killAll(t *testing.T, p *Provider) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failGuard)
		defer cancel()
		sbs, _ := p.List(ctx)
		for _, sb := range sbs {
			_ = p.Kill(ctx, sb.ID)
		}
	})
}

// call runs script in key's sandbox through m and returns the lease's
// sandbox and generation, the output and the checked error.
func call(ctx context.Context, m *manage.Manager, key string, named bool, script string) (string, int64, string, error) {
	l, err := m.Acquire(ctx, key, named)
	if err != nil {
		return "", 0, "", err
	}
	defer l.Release()
	res, err := l.Client.Run(ctx, sh(script), envdclient.RunOptions{})
	if err = l.Check(ctx, err); err != nil {
		return l.Sandbox.ID, l.Generation, "", err
	}
	return l.Sandbox.ID, l.Generation, stdout(res), nil
}

// A server that starts again on the same state directory reattaches to the
// named workspace's container: the same one, with its background process
// still running (it was paused at shutdown and is resumed).
func TestReattachAfterRestart(t *testing.T) {
	dir := envdtest.ShortTempDir(t)
	ctx := t.Context()
	first := startServer(t, dir, nil)
	killAll(t, first.p)
	id, gen, _, err := call(ctx, first.m, "stdio:re", true, "sleep 300 >/dev/null 2>&1 &")
	if err != nil {
		t.Fatal(err)
	}
	first.stop(t)
	if info, err := first.p.Info(ctx, id); err == nil && info.State != manage.StatePaused {
		t.Logf("after shutdown: %s", info.State)
	}

	second := startServer(t, dir, nil)
	rep, err := second.p.ReapUnowned(ctx, second.store, ReapOptions{MinAge: -1})
	if err != nil || len(rep.Containers) != 0 {
		t.Fatalf("the reaper at the second start removed %+v (%v); the store owns the container", rep, err)
	}
	id2, gen2, out, err := call(ctx, second.m, "stdio:re", true, "ps -o comm | grep -c sleep")
	if err != nil {
		t.Fatal(err)
	}
	if id2 != id || gen2 != gen || out != "1\n" {
		t.Fatalf("after a restart: sandbox %s generation %d, sleeps %q; want %s, %d and the sleep still running", id2, gen2, out, id, gen)
	}
}

// A named workspace's sandbox removed behind the Manager's back: the next
// call reports the loss, the replacement runs on the same volume, and the
// loss says only the workspace's files were kept; a reset removes them.
func TestNamedWorkspaceRecreation(t *testing.T) {
	s := startServer(t, envdtest.ShortTempDir(t), nil)
	killAll(t, s.p)
	ctx := t.Context()
	id, _, _, err := call(ctx, s.m, "stdio:keep", true, "echo kept > f")
	if err != nil {
		t.Fatal(err)
	}
	if err := dockertest.Engine(t).ContainerRemove(ctx, containerName(id), container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = call(ctx, s.m, "stdio:keep", true, "true")
	le, ok := manage.AsLost(err)
	if !ok || !le.Replaced || !le.FilesKept || !le.OnlyWorkspaceKept || le.Generation != 2 {
		t.Fatalf("call after docker rm -f: %v (%+v); want a replacement keeping only the workspace", err, le)
	}
	if _, gen, out, err := call(ctx, s.m, "stdio:keep", true, "cat f"); err != nil || out != "kept\n" || gen != 2 {
		t.Fatalf("on the replacement: %q, generation %d, %v", out, gen, err)
	}
	if _, err := s.m.Reset(ctx, "stdio:keep", true); err != nil {
		t.Fatal(err)
	}
	if _, _, out, err := call(ctx, s.m, "stdio:keep", true, "cat f 2>/dev/null || echo none"); err != nil || out != "none\n" {
		t.Fatalf("after a reset: %q, %v; want the files gone", out, err)
	}
}

// 50 calls in flight when the container is removed: exactly one
// replacement, every call either ran or reports the loss, all on one
// sandbox afterwards.
func TestConcurrentCallsDuringLoss(t *testing.T) {
	s := startServer(t, envdtest.ShortTempDir(t), nil)
	killAll(t, s.p)
	ctx := t.Context()
	id, _, _, err := call(ctx, s.m, "k", false, "true")
	if err != nil {
		t.Fatal(err)
	}
	if err := dockertest.Engine(t).ContainerRemove(ctx, containerName(id), container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	const n = 50
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { ids[i], _, _, errs[i] = call(ctx, s.m, "k", false, "true") })
	}
	wg.Wait()
	replacements := map[string]bool{}
	for i, err := range errs {
		if le, ok := manage.AsLost(err); ok {
			if !le.Replaced || le.Generation != 2 {
				t.Errorf("call %d: %v", i, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("call %d: %v", i, err)
			continue
		}
		replacements[ids[i]] = true
	}
	if st := s.m.Stats(); st.Recreations != 1 {
		t.Fatalf("%d recreations, want 1", st.Recreations)
	}
	_, gen, _, err := call(ctx, s.m, "k", false, "true")
	if err != nil || gen != 2 {
		t.Fatalf("after: generation %d, %v", gen, err)
	}
	list, err := s.p.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("containers after the loss: %+v, %v; want exactly one", list, err)
	}
	for r := range replacements {
		if r != list[0].ID {
			t.Errorf("a call ran in %s, not the one replacement %s", r, list[0].ID)
		}
	}
}

// engineProxy forwards connections on a unix socket to the engine's until
// stopped; start it again with listen.
type engineProxy struct {
	path, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func (e *engineProxy) listen(t *testing.T) {
	t.Helper()
	_ = os.Remove(e.path)
	ln, err := net.Listen("unix", e.path)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.ln = ln
	e.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", e.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			e.mu.Lock()
			e.conns = append(e.conns, c, up)
			e.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
}

// stop closes the listener and every forwarded connection: the engine is
// unreachable.
func (e *engineProxy) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ln != nil {
		_ = e.ln.Close()
		e.ln = nil
	}
	for _, c := range e.conns {
		_ = c.Close()
	}
	e.conns = nil
}

// An engine that stops answering (dockerd is shared on this machine, so the
// test cuts a proxy in front of it rather than restarting it): New says
// what is wrong; a running provider's Info is inconclusive (an error, never
// "gone"), so the Manager replaces nothing, and calls into the running
// sandbox go on; when the engine is back, everything works again.
func TestEngineUnreachable(t *testing.T) {
	dir := envdtest.ShortTempDir(t)
	if _, err := New(t.Context(), Config{StateDir: dir, Host: "unix://" + filepath.Join(dir, "nothing.sock"), Logger: quiet}); err == nil ||
		!strings.Contains(err.Error(), "cannot reach the docker engine at unix://") || !strings.Contains(err.Error(), "is dockerd running?") {
		t.Fatalf("New on no engine: %v", err)
	}
	proxy := &engineProxy{path: filepath.Join(dir, "engine.sock"), target: strings.TrimPrefix(DefaultHost, "unix://")}
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		proxy.target = strings.TrimPrefix(h, "unix://")
	}
	proxy.listen(t)
	t.Cleanup(proxy.stop)
	s := startServer(t, dir, func(c *Config) { c.Host = "unix://" + proxy.path })
	killAll(t, s.p)
	ctx := t.Context()
	id, _, _, err := call(ctx, s.m, "k", false, "true")
	if err != nil {
		t.Fatal(err)
	}
	proxy.stop()
	_, err = s.p.Info(ctx, id)
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "docker engine") {
		t.Fatalf("Info with the engine unreachable: %v; want unavailable, naming the engine", err)
	}
	if _, _, out, err := call(ctx, s.m, "k", false, "echo still"); err != nil || out != "still\n" {
		t.Fatalf("a call while the engine is unreachable: %q, %v", out, err)
	}
	if err := s.p.Pause(ctx, id); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("Pause with the engine unreachable: %v", err)
	}
	proxy.listen(t)
	if info, err := s.p.Info(ctx, id); err != nil || info.State != manage.StateRunning {
		t.Fatalf("Info once the engine is back: %+v, %v", info, err)
	}
	if st := s.m.Stats(); st.Recreations != 0 {
		t.Fatalf("%d recreations while the engine was away", st.Recreations)
	}
}
