//go:build linux

package e2b

// A damaged store file rebuilt from the sandboxes the E2B API lists: the
// Manager and the bolt store over this provider, against a real
// E2B-compatible server (package e2bserver) on the local provider.

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore/boltstoretest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bserver"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// e2bServer serves an E2B-compatible API with testKey over a local
// provider on a fresh state directory, until the test ends; it returns
// the API's URL, which is also the sandboxes' envd proxy.
func e2bServer(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "e2b-rediscover-")
	if err != nil {
		t.Fatal(err)
	}
	// Searchable by the unprivileged user bwrap runs sandboxes as.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	lp, err := local.New(context.Background(), local.Config{StateDir: filepath.Join(dir, "state"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := e2bserver.New(context.Background(), e2bserver.Config{Provider: lp, APIKeys: []string{testKey}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Close(context.Background()) // kills every sandbox (records in memory)
		_ = lp.Close(context.Background())
		_ = os.RemoveAll(dir)
	})
	return hs.URL
}

// startManager runs a Manager on p and a bolt store in dir; both end when
// the test does.
func startManager(t *testing.T, p *Provider, dir string) (*manage.Manager, *boltstore.Store) {
	t.Helper()
	store, err := boltstore.Open(dir, boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manage.New(manage.Options{Provider: p, Store: store, AutoRecreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m.Shutdown(context.Background())
		_ = store.Close()
	})
	return m, store
}

// A damaged state.db used to make a named e2b workspace come back as a new
// empty sandbox, the old one left running or paused in E2B. Now the
// Manager rebuilds the record from the sandbox's metadata, and the first
// call reaches the same sandbox, file and process, with the rebuild event;
// sandboxes of another owner, or not made by this provider, are never
// adopted.
func TestDamagedStoreRebuiltFromE2B(t *testing.T) {
	for _, how := range []string{"truncated", "bit-flipped"} {
		t.Run(how, func(t *testing.T) {
			url := e2bServer(t)
			p := newTestProvider(t, url, func(c *Config) { c.SandboxURL, c.Workdir, c.Logger = url, "/workspace", quiet })
			ctx := t.Context()
			const key = "stdio:keep"
			// Another owner's sandbox of the same key, and one with our
			// owner's metadata that this provider did not make.
			other := newTestProvider(t, url, func(c *Config) { c.Owner, c.Logger = "someone-else", quiet })
			if _, err := other.Create(ctx, manage.SandboxConfig{Key: key, Named: true, Generation: 9}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.API().Create(ctx, e2bapi.NewSandbox{TemplateID: DefaultTemplate, Timeout: 600, Metadata: map[string]string{
				MetaOwner: "me", MetaKey: key, MetaNamed: "true", MetaGeneration: "9"}}); err != nil {
				t.Fatal(err)
			}

			dir := t.TempDir()
			m, store := startManager(t, p, dir)
			l, err := m.Acquire(ctx, key, true)
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.Client.Run(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", "echo still here > /workspace/kept.txt"}}, envdclient.RunOptions{})
			if err = l.Check(ctx, err); err != nil || res.ExitCode != 0 {
				t.Fatalf("writing the file: %+v, %v", res, err)
			}
			h, err := l.Client.Start(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", "sleep 3600"}, Tag: "keeper"}, envdclient.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pid := h.Pid()
			h.Disconnect()
			id, gen := l.Sandbox.ID, l.Generation
			l.Release()
			if err := m.Shutdown(ctx); err != nil { // pauses the named workspace
				t.Fatal(err)
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			boltstoretest.Damage(t, dir, how)

			found, err := p.Rediscover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != 1 || found[0].Sandbox.ID != id || found[0].Key != key || !found[0].Named || found[0].Generation != gen || found[0].Sandbox.State != manage.StatePaused {
				t.Fatalf("Rediscover: %+v; want only sandbox %s of %s, named, generation %d, paused", found, id, key, gen)
			}

			m, store = startManager(t, p, dir)
			if store.Damages() != 1 {
				t.Fatalf("Damages after opening the damaged file: %d", store.Damages())
			}
			l, err = m.Acquire(ctx, key, true)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if l.Sandbox.ID != id || l.Generation != gen {
				t.Fatalf("after the rebuild: sandbox %s generation %d; want %s generation %d", l.Sandbox.ID, l.Generation, id, gen)
			}
			if !slices.ContainsFunc(l.Events, func(ev manage.Event) bool { return ev.Kind == manage.EventStoreRebuilt && ev.FilesKept }) {
				t.Fatalf("events of the first call after the rebuild: %+v; want the store rebuilt with the files kept", l.Events)
			}
			script := "cat /workspace/kept.txt; kill -0 " + strconv.Itoa(int(pid)) + " && echo alive"
			res, err = l.Client.Run(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}, envdclient.RunOptions{})
			if err = l.Check(ctx, err); err != nil || string(res.Stdout.Bytes()) != "still here\nalive\n" {
				t.Fatalf("the first call after the rebuild: %q, %v; want the file and the process", res.Stdout.Bytes(), err)
			}
			rec, ok, err := store.Get(ctx, key)
			if err != nil || !ok || rec.SandboxID != id || !rec.Named || rec.Generation != gen {
				t.Fatalf("the rebuilt record: %+v, %v, %v", rec, ok, err)
			}
		})
	}
}

// Rediscover attributes a sandbox by its metadata; an older generation of
// a key that has a newer one, and a sandbox without a generation, are
// returned unattributed, to be left in place.
func TestRediscoverAttribution(t *testing.T) {
	url := e2bServer(t)
	p := newTestProvider(t, url, func(c *Config) { c.SandboxURL, c.Logger = url, quiet })
	ctx := t.Context()
	older, err := p.Create(ctx, manage.SandboxConfig{Key: "k", Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	newer, err := p.Create(ctx, manage.SandboxConfig{Key: "k", Generation: 2})
	if err != nil {
		t.Fatal(err)
	}
	nogen, err := p.Create(ctx, manage.SandboxConfig{Key: "old"})
	if err != nil {
		t.Fatal(err)
	}
	found, err := p.Rediscover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]manage.Rediscovered{}
	for _, r := range found {
		got[r.Sandbox.ID] = r
	}
	if len(found) != 3 || got[newer.ID].Key != "k" || got[newer.ID].Generation != 2 || got[newer.ID].Named ||
		got[older.ID].Key != "" || got[nogen.ID].Key != "" || got[older.ID].Sandbox.State != manage.StateRunning {
		t.Fatalf("Rediscover: %+v; want %s as k's generation 2, %s and %s unattributed", found, newer.ID, older.ID, nogen.ID)
	}
}
