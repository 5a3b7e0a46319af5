//go:build linux

package local

// The Manager on real local sandboxes (bubblewrap, a real envd binary):
// the lifecycle promises of the manage package, end to end.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// failGuard bounds waits that only last that long when something is broken.
const failGuard = 30 * time.Second

type stack struct {
	p     *Provider
	store *boltstore.Store
	m     *manage.Manager
}

// newStack runs a Manager with a bwrap Provider and a bolt store on the
// state directory dir.
func newStack(t testing.TB, dir string, mod func(*manage.Options)) *stack {
	t.Helper()
	p := needBwrap(t, Config{StateDir: dir, Logger: quiet})
	if p.envd.binDir != "" {
		t.Fatalf("the provider runs a copy of the envd binary in %s: the test's binary should be reachable", p.envd.binDir)
	}
	store, err := boltstore.Open(dir, boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	opts := manage.Options{Provider: p, Store: store, AutoRecreate: true, Logger: quiet}
	if mod != nil {
		mod(&opts)
	}
	m, err := manage.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{p: p, store: store, m: m}
	t.Cleanup(func() { s.close() })
	return s
}

func (s *stack) close() {
	ctx := context.Background()
	_ = s.m.Shutdown(ctx)
	_ = s.p.Close(ctx)
	_ = s.store.Close()
}

func shCmd(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

// envdPid returns the envd process of the daemon p runs for sandbox id:
// among the daemon's processes, the one running envd (its first argument is
// "envd", for the lean envd as for `sandbox-mcp envd`).
func envdPid(t testing.TB, p *Provider, id string) int {
	t.Helper()
	d := p.daemonOf(id)
	if d == nil || !d.alive() {
		t.Fatalf("the provider runs no daemon for sandbox %s", id)
	}
	for _, pid := range descendants(d.pid) {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(string(data), "\x00"); len(args) > 1 && args[1] == "envd" {
			return pid
		}
	}
	t.Fatalf("no envd process among the daemon's processes %v", descendants(d.pid))
	return 0
}

// runs counts how many times a command appended to the workspace file
// name, read from the host: outside the sandbox.
func runs(t testing.TB, p *Provider, id, name string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(p.dir(id), "workspace", name))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(raw), "ran\n")
}

type firstWrite struct {
	once sync.Once
	ch   chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

// SIGKILL of the daemon while a long command runs: the call returns with
// "may have partly run", the command ran once and is never replayed, and the
// next call runs in generation + 1 (the stopped sandbox is restarted with
// its files).
func TestLocalDaemonKilledMidCommand(t *testing.T) {
	s := newStack(t, newStateDir(t), nil)
	ctx := t.Context()
	l, err := s.m.Acquire(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	started := &firstWrite{ch: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := l.Client.Run(ctx, shCmd("echo ran >> count; echo started; exec sleep 300"), envdclient.RunOptions{Stdout: started})
		errc <- l.Check(context.Background(), err)
	}()
	select {
	case <-started.ch:
	case err := <-errc:
		t.Fatalf("the command ended before it wrote anything: %v", err)
	case <-time.After(failGuard):
		t.Fatal("the command wrote nothing")
	}
	pid := envdPid(t, s.p, id)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-errc:
	case <-time.After(failGuard):
		t.Fatal("the in-flight call did not return after its daemon was killed")
	}
	returned := time.Since(killed)
	l.Release()
	le, ok := manage.AsLost(err)
	if !ok || le.NotRun || !le.Replaced || le.Generation != 2 {
		t.Fatalf("call during the daemon's death = %v (%+v); want 'may have partly run', replaced by generation 2", err, le)
	}
	t.Logf("the in-flight call returned %v after SIGKILL (goal: within 2 s)", returned)
	l, err = s.m.Acquire(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Generation != 2 {
		t.Fatalf("next call on generation %d, want 2", l.Generation)
	}
	if n := runs(t, s.p, l.Sandbox.ID, "count"); n != 1 {
		t.Fatalf("the command ran %d times; want exactly 1", n)
	}
	if res, err := l.Client.Run(ctx, shCmd("echo ran >> count"), envdclient.RunOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if n := runs(t, s.p, l.Sandbox.ID, "count"); n != 2 {
		t.Fatalf("count after the next call = %d, want 2", n)
	}
}

// SIGKILL of the daemon while idle: the next call gets "NOT run" and its
// command never runs.
func TestLocalDaemonKilledWhileIdle(t *testing.T) {
	s := newStack(t, newStateDir(t), nil)
	ctx := t.Context()
	l, err := s.m.Acquire(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	l.Release()
	done := s.p.daemonDone(id)
	if err := syscall.Kill(envdPid(t, s.p, id), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done: // the provider has seen the daemon die
	case <-time.After(failGuard):
		t.Fatal("the provider did not see its daemon die")
	}
	l, err = s.m.Acquire(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Client.Run(ctx, shCmd("echo ran >> count"), envdclient.RunOptions{})
	err = l.Check(context.Background(), err)
	l.Release()
	le, ok := manage.AsLost(err)
	if !ok || !le.NotRun || !le.Replaced || le.Generation != 2 {
		t.Fatalf("call after an idle death = %v (%+v); want NOT run, replaced by generation 2", err, le)
	}
	if n := runs(t, s.p, id, "count"); n != 0 {
		t.Fatalf("the command ran %d times; want 0", n)
	}
}

// Pause (the idle timer's path) freezes the sandbox; the next call resumes
// it transparently, and a background process started before is still
// running after.
func TestLocalPauseResumeKeepsProcesses(t *testing.T) {
	s := newStack(t, newStateDir(t), func(o *manage.Options) { o.IdlePause = time.Hour })
	ctx := t.Context()
	l, err := s.m.Acquire(ctx, "k", true)
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Client.Start(ctx, shCmd("while :; do echo tick >> ticks; sleep 0.05; done"), envdclient.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := h.Pid()
	h.Disconnect()
	l.Release()
	if err := s.m.Pause(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	info, err := s.p.Info(ctx, l.Sandbox.ID)
	if err != nil || info.State != manage.StatePaused {
		t.Fatalf("after Pause: %+v, %v", info, err)
	}
	l, err = s.m.Acquire(ctx, "k", true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if !slices.ContainsFunc(l.Events, func(e manage.Event) bool { return e.Kind == manage.EventResumed }) || l.Generation != 1 {
		t.Fatalf("after resume: events %+v, generation %d; want a resumed event on generation 1", l.Events, l.Generation)
	}
	procs, err := l.Client.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(procs, func(p envdclient.ProcessInfo) bool { return p.Pid == pid }) {
		t.Fatalf("background process %d gone after pause and resume: %+v", pid, procs)
	}
	// And it still makes progress: its file grows past what it was.
	ticks := filepath.Join(s.p.dir(l.Sandbox.ID), "workspace", "ticks")
	before := fileSize(ticks)
	wctx, cancel := context.WithTimeout(ctx, failGuard)
	defer cancel()
	w, err := l.Client.Watch(wctx, "", envdclient.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	go func() {
		// The watch itself outlives its context: end it on the guard.
		<-wctx.Done()
		w.Close()
	}()
	wrote := false
	for ev := range w.Events() {
		if ev.Name == "ticks" && ev.Type == envdclient.EventWrite {
			wrote = true
			break
		}
	}
	if !wrote {
		t.Fatalf("the watch ended without a write to ticks: %v", w.Err())
	}
	if after := fileSize(ticks); after <= before {
		t.Fatalf("background process made no progress after resume (%d → %d bytes)", before, after)
	}
}

// fileSize is the size of the file at path, 0 when it does not exist yet.
func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

// A server restarted with the same named workspace finds its files and
// processes: the sandbox's daemon outlived the server, paused, and comes
// back resumed.
func TestLocalNamedWorkspaceSurvivesRestart(t *testing.T) {
	dir := newStateDir(t)
	ctx := t.Context()
	s1 := newStack(t, dir, nil)
	l, err := s1.m.Acquire(ctx, "stdio:proj", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Client.Upload(ctx, "notes.txt", strings.NewReader("kept across restarts"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	l.Release()
	s1.close()

	s2 := newStack(t, dir, nil)
	t.Cleanup(func() { _ = s2.p.Kill(context.Background(), id) })
	l, err = s2.m.Acquire(ctx, "stdio:proj", true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Sandbox.ID != id || l.Generation != 1 || !slices.ContainsFunc(l.Events, func(e manage.Event) bool { return e.Kind == manage.EventResumed }) {
		t.Fatalf("after restart: sandbox %s generation %d events %+v; want %s resumed as generation 1", l.Sandbox.ID, l.Generation, l.Events, id)
	}
	dl, err := l.Client.Download(ctx, "notes.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(dl)
	dl.Close()
	if string(got) != "kept across restarts" {
		t.Fatalf("notes.txt = %q", got)
	}
}

// BenchmarkManagerColdAcquire is a new workspace's first call: Manager
// Acquire (local provider Create) plus a Run of `true`.
func BenchmarkManagerColdAcquire(b *testing.B) {
	s := newStack(b, newStateDir(b), nil)
	i := 0
	for b.Loop() {
		i++
		key := fmt.Sprintf("bench-%d", i)
		l, err := s.m.Acquire(b.Context(), key, false)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Client.Run(b.Context(), envdclient.Command{Cmd: "/bin/true"}, envdclient.RunOptions{}); err != nil {
			b.Fatal(err)
		}
		l.Release()
		b.StopTimer()
		_ = s.m.EndSession(b.Context(), key)
		b.StartTimer()
	}
}

// BenchmarkManagerWarmAcquire is Acquire plus Release of a workspace whose
// sandbox runs.
func BenchmarkManagerWarmAcquire(b *testing.B) {
	s := newStack(b, newStateDir(b), nil)
	l, err := s.m.Acquire(b.Context(), "warm", false)
	if err != nil {
		b.Fatal(err)
	}
	l.Release()
	for b.Loop() {
		l, err := s.m.Acquire(b.Context(), "warm", false)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
}

// BenchmarkManagerPauseResume is a Pause (freezer) and the transparent
// resume of the next Acquire.
func BenchmarkManagerPauseResume(b *testing.B) {
	s := newStack(b, newStateDir(b), nil)
	l, err := s.m.Acquire(b.Context(), "pr", true)
	if err != nil {
		b.Fatal(err)
	}
	l.Release()
	for b.Loop() {
		if err := s.m.Pause(b.Context(), "pr"); err != nil {
			b.Fatal(err)
		}
		l, err := s.m.Acquire(b.Context(), "pr", true)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
}
