//go:build linux

package main

// The e2b provider's lifecycle suite: the provider under the Manager, as
// `serve --provider e2b` runs them, against a real `sandbox-mcp manage
// serve` process on loopback (startManageServe) and the real envd of its
// local sandboxes, reached through its proxy.

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// failGuard bounds waits that only last that long when something is broken.
const failGuard = 30 * time.Second

func newE2BProvider(t testing.TB, api *manageServer, mods ...func(*e2b.Config)) *e2b.Provider {
	t.Helper()
	cfg := e2b.Config{
		APIKey: api.APIKey, APIURL: api.URL, SandboxURL: api.URL, Workdir: api.Workdir,
		Owner: "lifecycle-test", Logger: quietLog,
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	p, err := e2b.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newE2BManager(t testing.TB, p manage.Provider, store manage.Store, mods ...func(*manage.Options)) *manage.Manager {
	t.Helper()
	opts := manage.Options{Provider: p, Store: store, AutoRecreate: true, Logger: quietLog}
	for _, mod := range mods {
		mod(&opts)
	}
	m, err := manage.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

func shCommand(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

// run runs script under a new lease on key and returns its stdout.
func runLeased(t *testing.T, m *manage.Manager, key, script string) (string, *manage.Lease) {
	t.Helper()
	l, err := m.Acquire(t.Context(), key, true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var out strings.Builder
	res, err := l.Client.Run(t.Context(), shCommand(script), envdclient.RunOptions{Stdout: &out})
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d", script, res.ExitCode)
	}
	return out.String(), l
}

// waitFor polls the API until cond holds for sandbox id's detail.
func waitForSandbox(t *testing.T, c *e2b.Client, id, what string, cond func(e2bapi.SandboxDetail) bool) {
	t.Helper()
	deadline := time.Now().Add(failGuard)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		d, err := c.Get(t.Context(), id)
		if err == nil && cond(d) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: %s did not happen (last: %+v, %v)", id, what, d, err)
		}
		<-tick.C
	}
}

func hasEvent(evs []manage.Event, kind manage.EventKind) bool {
	for _, e := range evs {
		if e.Kind == kind {
			return true
		}
	}
	return false
}

// TestE2BLifecycle: create → exec through envd → pause → resume (files kept)
// → loss by DELETE behind the server's back → the Manager confirms the 404
// and recreates, reporting it, without replaying the call.
func TestE2BLifecycle(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	p := newE2BProvider(t, api)
	m := newE2BManager(t, p, nil)
	ctx := t.Context()

	out, l := runLeased(t, m, "k", "echo hello > f; cat f")
	if out != "hello\n" || l.Generation != 1 || !hasEvent(l.Events, manage.EventCreated) {
		t.Fatalf("first call: %q, generation %d, events %v", out, l.Generation, l.Events)
	}
	id := l.Sandbox.ID
	ep, err := p.Endpoint(ctx, id)
	if err != nil || ep.RoutingID != id || ep.RoutingPort != e2bapi.EnvdPort || ep.URL != api.URL || ep.AccessToken == "" {
		t.Fatalf("endpoint %+v, %v; want the sandbox URL, routing headers and an access token", ep, err)
	}
	d, err := p.API().Get(ctx, id)
	if err != nil || d.Metadata[e2b.MetaKey] != "k" || d.Metadata[e2b.MetaOwner] != "lifecycle-test" ||
		d.Metadata[e2b.MetaGeneration] != "1" || d.Lifecycle == nil || d.Lifecycle.OnTimeout != "pause" {
		t.Fatalf("sandbox detail %+v, %v; want the labels and onTimeout pause", d, err)
	}

	if err := m.Pause(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if info, err := p.Info(ctx, id); err != nil || info.State != manage.StatePaused {
		t.Fatalf("after Pause: %+v, %v", info, err)
	}
	if err := p.Pause(ctx, id); err != nil {
		t.Fatalf("pausing a paused sandbox (409) = %v, want success", err)
	}
	out, l = runLeased(t, m, "k", "cat f")
	if out != "hello\n" || l.Sandbox.ID != id || !hasEvent(l.Events, manage.EventResumed) {
		t.Fatalf("after resume: %q on %s, events %v; want the same sandbox, resumed, files kept", out, l.Sandbox.ID, l.Events)
	}

	// Lost behind the server's back.
	if existed, err := p.API().Kill(ctx, id); err != nil || !existed {
		t.Fatalf("DELETE: %v, %v", existed, err)
	}
	l, err = m.Acquire(ctx, "k", true)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Client.Run(ctx, shCommand("echo ran >> count"), envdclient.RunOptions{})
	err = l.Check(context.Background(), err)
	l.Release()
	le, ok := manage.AsLost(err)
	if !ok || !le.Replaced || le.Generation != 2 || le.State != manage.StateGone || le.Detail != "not found" {
		t.Fatalf("call on a deleted sandbox = %v (%+v); want a confirmed loss (not found), replaced by generation 2", err, le)
	}
	out, l = runLeased(t, m, "k", "ls -a; test ! -e count && test ! -e f && echo clean")
	if l.Generation != 2 || l.Sandbox.ID == id || !strings.HasSuffix(out, "clean\n") {
		t.Fatalf("after the loss: generation %d on %s, %q; want a fresh generation 2 where the lost call never ran", l.Generation, l.Sandbox.ID, out)
	}
	if info, err := p.Info(ctx, id); err != nil || info.State != manage.StateGone {
		t.Fatalf("the deleted sandbox: %+v, %v; want gone", info, err)
	}
	if err := p.Kill(ctx, id); err != nil {
		t.Fatalf("killing a gone sandbox (404) = %v, want success", err)
	}
}

// TestE2BExpiryPausesAndResumes: a sandbox whose time to live runs out is
// paused by the API (autoPause), not killed; the next call resumes it
// transparently through the proxy (autoResume), files and all.
func TestE2BExpiryPausesAndResumes(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	p := newE2BProvider(t, api)
	m := newE2BManager(t, p, nil)
	ctx := t.Context()
	_, l := runLeased(t, m, "k", "echo kept > f")
	id := l.Sandbox.ID
	if err := p.API().SetTimeout(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	waitForSandbox(t, p.API(), id, "expiry into pause", func(d e2bapi.SandboxDetail) bool { return d.State == e2bapi.StatePaused })
	out, l := runLeased(t, m, "k", "cat f")
	if out != "kept\n" || l.Sandbox.ID != id || l.Generation != 1 {
		t.Fatalf("after expiry: %q on %s generation %d; want the same sandbox, files kept", out, l.Sandbox.ID, l.Generation)
	}
}

// TestE2BIdlePauseAndResume: a sandbox without a call for IdlePause is
// paused through the API; the next call resumes it (connect), files kept.
func TestE2BIdlePauseAndResume(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	p := newE2BProvider(t, api)
	m := newE2BManager(t, p, nil, func(o *manage.Options) { o.IdlePause = 100 * time.Millisecond })
	_, l := runLeased(t, m, "k", "echo idle > f")
	id := l.Sandbox.ID
	waitForSandbox(t, p.API(), id, "idle pause", func(d e2bapi.SandboxDetail) bool { return d.State == e2bapi.StatePaused })
	out, l := runLeased(t, m, "k", "cat f")
	if out != "idle\n" || l.Sandbox.ID != id || l.Generation != 1 || !hasEvent(l.Events, manage.EventResumed) {
		t.Fatalf("after the idle pause: %q on %s generation %d, events %v; want the same sandbox resumed, files kept", out, l.Sandbox.ID, l.Generation, l.Events)
	}
}

// TestE2BBusySandboxKeptAlive: a command that runs longer than the sandbox's
// time to live is not cut off, because the Manager's KeepAlive hook
// refreshes the sandbox while the call holds its lease.
func TestE2BBusySandboxKeptAlive(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	p := newE2BProvider(t, api, func(c *e2b.Config) { c.Lifetime = 2 * time.Second })
	m := newE2BManager(t, p, nil)
	ctx, cancel := context.WithTimeout(t.Context(), failGuard)
	defer cancel()
	l, err := m.Acquire(ctx, "k", true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var out strings.Builder
	res, err := l.Client.Run(ctx, shCommand("sleep 4; echo done"), envdclient.RunOptions{Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("a 4 s command in a sandbox with a 2 s time to live: %+v, %q, %v", res, out.String(), err)
	}
	if d, err := p.API().Get(ctx, l.Sandbox.ID); err != nil || d.State != e2bapi.StateRunning {
		t.Fatalf("after the call: %+v, %v; want running", d, err)
	}
}

// TestE2BRestartFindsItsSandboxes: a new provider and Manager (a restarted
// server) with the same store reattach to the same sandbox, and List finds
// it by its owner label; so do they after manage serve itself restarts.
func TestE2BRestartFindsItsSandboxes(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	store := manage.NewMemoryStore()
	p := newE2BProvider(t, api)
	m := newE2BManager(t, p, store)
	_, l := runLeased(t, m, "k", "echo before > f")
	id := l.Sandbox.ID
	if err := m.Pause(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	p2 := newE2BProvider(t, api)
	list, err := p2.List(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].State != manage.StatePaused {
		t.Fatalf("List after a restart = %+v, %v; want the one paused sandbox", list, err)
	}
	m2 := newE2BManager(t, p2, store)
	out, l := runLeased(t, m2, "k", "echo after >> f; cat f")
	if out != "before\nafter\n" || l.Sandbox.ID != id {
		t.Fatalf("after a restart: %q on %s; want sandbox %s with its files", out, l.Sandbox.ID, id)
	}
	if err := m2.Pause(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}

	// The management server restarts too (on its state directory, at a new
	// port): the paused sandbox is still there for the next server.
	api.Stop(t)
	api = startManageServe(t, manageServeConfig{APIKey: api.APIKey, StateDir: api.StateDir})
	m3 := newE2BManager(t, newE2BProvider(t, api), store)
	out, l = runLeased(t, m3, "k", "cat f")
	if out != "before\nafter\n" || l.Sandbox.ID != id || l.Generation != 1 {
		t.Fatalf("after manage serve restarted: %q on %s generation %d; want sandbox %s with its files", out, l.Sandbox.ID, l.Generation, id)
	}
}

// TestE2BWrongKeyRefusedAtStart: a key the API refuses fails New, clearly.
func TestE2BWrongKeyRefusedAtStart(t *testing.T) {
	api := startManageServe(t, manageServeConfig{})
	_, err := e2b.New(t.Context(), e2b.Config{APIKey: "e2b_wrong", APIURL: api.URL, Logger: quietLog})
	if !e2b.IsUnauthorized(err) || !strings.Contains(err.Error(), "E2B_API_KEY") {
		t.Fatalf("New with a wrong key = %v", err)
	}
}
