//go:build linux

package e2b_test

// The e2b provider under the Manager, against an E2B-compatible management
// API (managementAPI) and real envd daemons reached through its proxy.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// failGuard bounds waits that only last that long when something is broken.
const failGuard = 30 * time.Second

func newProvider(t *testing.T, api testAPI, mods ...func(*e2b.Config)) *e2b.Provider {
	t.Helper()
	cfg := e2b.Config{
		APIKey: api.APIKey, APIURL: api.APIURL, SandboxURL: api.SandboxURL, Workdir: api.Workdir,
		Owner: "lifecycle-test", Logger: quiet,
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

func newManager(t *testing.T, p manage.Provider, store manage.Store) *manage.Manager {
	t.Helper()
	m, err := manage.New(manage.Options{Provider: p, Store: store, AutoRecreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

func sh(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

// run runs script under a new lease on key and returns its stdout.
func run(t *testing.T, m *manage.Manager, key, script string) (string, *manage.Lease) {
	t.Helper()
	l, err := m.Acquire(t.Context(), key, true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var out strings.Builder
	res, err := l.Client.Run(t.Context(), sh(script), envdclient.RunOptions{Stdout: &out})
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d", script, res.ExitCode)
	}
	return out.String(), l
}

// waitFor polls the API until cond holds for sandbox id's detail.
func waitFor(t *testing.T, c *e2b.Client, id, what string, cond func(e2bapi.SandboxDetail) bool) {
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

// TestLifecycle: create → exec through envd → pause → resume (files kept)
// → loss by DELETE behind the server's back → the Manager confirms the 404
// and recreates, reporting it, without replaying the call.
func TestLifecycle(t *testing.T) {
	api := managementAPI(t)
	p := newProvider(t, api)
	m := newManager(t, p, nil)
	ctx := t.Context()

	out, l := run(t, m, "k", "echo hello > f; cat f")
	if out != "hello\n" || l.Generation != 1 || !hasEvent(l.Events, manage.EventCreated) {
		t.Fatalf("first call: %q, generation %d, events %v", out, l.Generation, l.Events)
	}
	id := l.Sandbox.ID
	ep, err := p.Endpoint(ctx, id)
	if err != nil || ep.RoutingID != id || ep.RoutingPort != e2bapi.EnvdPort || ep.URL != api.SandboxURL || ep.AccessToken == "" {
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
	out, l = run(t, m, "k", "cat f")
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
	_, err = l.Client.Run(ctx, sh("echo ran >> count"), envdclient.RunOptions{})
	err = l.Check(context.Background(), err)
	l.Release()
	le, ok := manage.AsLost(err)
	if !ok || !le.Replaced || le.Generation != 2 || le.State != manage.StateGone || le.Detail != "not found" {
		t.Fatalf("call on a deleted sandbox = %v (%+v); want a confirmed loss (not found), replaced by generation 2", err, le)
	}
	out, l = run(t, m, "k", "ls -a; test ! -e count && test ! -e f && echo clean")
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

// TestExpiryPausesAndResumes: a sandbox whose time to live runs out is
// paused by the API (autoPause), not killed; the next call resumes it
// transparently through the proxy (autoResume), files and all.
func TestExpiryPausesAndResumes(t *testing.T) {
	api := managementAPI(t)
	p := newProvider(t, api)
	m := newManager(t, p, nil)
	ctx := t.Context()
	_, l := run(t, m, "k", "echo kept > f")
	id := l.Sandbox.ID
	if err := p.API().SetTimeout(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p.API(), id, "expiry into pause", func(d e2bapi.SandboxDetail) bool { return d.State == e2bapi.StatePaused })
	out, l := run(t, m, "k", "cat f")
	if out != "kept\n" || l.Sandbox.ID != id || l.Generation != 1 {
		t.Fatalf("after expiry: %q on %s generation %d; want the same sandbox, files kept", out, l.Sandbox.ID, l.Generation)
	}
}

// TestBusySandboxKeptAlive: a command that runs longer than the sandbox's
// time to live is not cut off, because the Manager's KeepAlive hook
// refreshes the sandbox while the call holds its lease.
func TestBusySandboxKeptAlive(t *testing.T) {
	api := managementAPI(t)
	p := newProvider(t, api, func(c *e2b.Config) { c.Lifetime = 2 * time.Second })
	m := newManager(t, p, nil)
	ctx, cancel := context.WithTimeout(t.Context(), failGuard)
	defer cancel()
	l, err := m.Acquire(ctx, "k", true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var out strings.Builder
	res, err := l.Client.Run(ctx, sh("sleep 4; echo done"), envdclient.RunOptions{Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "done\n" {
		t.Fatalf("a 4 s command in a sandbox with a 2 s time to live: %+v, %q, %v", res, out.String(), err)
	}
	if d, err := p.API().Get(ctx, l.Sandbox.ID); err != nil || d.State != e2bapi.StateRunning {
		t.Fatalf("after the call: %+v, %v; want running", d, err)
	}
}

// TestRestartFindsItsSandboxes: a new provider and Manager (a restarted
// server) with the same store reattach to the same sandbox, and List finds
// it by its owner label.
func TestRestartFindsItsSandboxes(t *testing.T) {
	api := managementAPI(t)
	store := manage.NewMemoryStore()
	p := newProvider(t, api)
	m := newManager(t, p, store)
	_, l := run(t, m, "k", "echo before > f")
	id := l.Sandbox.ID
	if err := m.Pause(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	p2 := newProvider(t, api)
	list, err := p2.List(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].State != manage.StatePaused {
		t.Fatalf("List after a restart = %+v, %v; want the one paused sandbox", list, err)
	}
	m2 := newManager(t, p2, store)
	out, l := run(t, m2, "k", "cat f")
	if out != "before\n" || l.Sandbox.ID != id {
		t.Fatalf("after a restart: %q on %s; want sandbox %s with its files", out, l.Sandbox.ID, id)
	}
}

// TestWrongKeyRefusedAtStart: a key the API refuses fails New, clearly.
func TestWrongKeyRefusedAtStart(t *testing.T) {
	api := managementAPI(t)
	_, err := e2b.New(t.Context(), e2b.Config{APIKey: "e2b_wrong", APIURL: api.APIURL, Logger: quiet})
	if !e2b.IsUnauthorized(err) || !strings.Contains(err.Error(), "E2B_API_KEY") {
		t.Fatalf("New with a wrong key = %v", err)
	}
}
