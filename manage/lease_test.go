//go:build linux

package manage_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

func TestConcurrentFirstCallsShareOneCreation(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	var wg sync.WaitGroup
	gens := make(chan int64, 50)
	for range 50 {
		wg.Go(func() {
			l, err := m.Acquire(context.Background(), "k", false)
			if err != nil {
				t.Error(err)
				return
			}
			defer l.Release()
			gens <- l.Generation
		})
	}
	wg.Wait()
	close(gens)
	for g := range gens {
		if g != 1 {
			t.Errorf("generation %d, want 1", g)
		}
	}
	if n := p.Creates.Load(); n != 1 {
		t.Fatalf("%d sandboxes created for one key, want 1", n)
	}
}

func TestStaleHandle(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	l.Release()
	if err := m.CheckHandle("k", "g1-p42", 1); err != nil {
		t.Fatalf("handle of the current generation refused: %v", err)
	}
	if _, err := m.Reset(t.Context(), "k", false); err != nil {
		t.Fatal(err)
	}
	err := m.CheckHandle("k", "g1-p42", 1)
	if !manage.IsStale(err) || !strings.Contains(err.Error(), "belongs to a previous sandbox") {
		t.Fatalf("stale handle = %v; want the 'belongs to a previous sandbox' error", err)
	}
}

func TestNamedWorkspaceReattachesAfterRestart(t *testing.T) {
	p := managetest.New(t)
	dir := t.TempDir()
	store1, err := boltstore.Open(dir, boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m1, err := manage.New(manage.Options{Provider: p, Store: store1, AutoRecreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m1.Acquire(t.Context(), "stdio:proj", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Client.Upload(t.Context(), "notes.txt", strings.NewReader("kept"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	l.Release()
	if err := m1.Shutdown(t.Context()); err != nil { // named → paused
		t.Fatal(err)
	}
	store1.Close()

	store2, err := boltstore.Open(dir, boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, p, func(o *manage.Options) { o.Store = store2 })
	l, err = m2.Acquire(t.Context(), "stdio:proj", true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Sandbox.ID != id || l.Generation != 1 {
		t.Fatalf("reattached to %s generation %d; want %s generation 1", l.Sandbox.ID, l.Generation, id)
	}
	dl, err := l.Client.Download(t.Context(), "notes.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(dl)
	dl.Close()
	if string(got) != "kept" {
		t.Fatalf("notes.txt = %q", got)
	}
}

// A recorded sandbox that could not be reached once (Endpoint failed) is
// reached on the next call: a lease never comes without a client.
func TestLeaseAlwaysHasAClient(t *testing.T) {
	p := managetest.New(t)
	store := manage.NewMemoryStore()
	m1 := newManager(t, p, func(o *manage.Options) { o.Store = store })
	acquire(t, m1, "k").Release()

	hp := &hookProvider{Provider: p}
	m2 := newManager(t, hp, func(o *manage.Options) { o.Store = store })
	// Armed once m2 exists, so only the Acquire below meets the failure.
	var once sync.Once
	hp.mu.Lock()
	hp.endpoint = func() error {
		var err error
		once.Do(func() { err = errors.New("provider API hiccup") })
		return err
	}
	hp.mu.Unlock()
	if _, err := m2.Acquire(t.Context(), "k", false); err == nil {
		t.Fatal("the first Acquire succeeded although the endpoint failed")
	}
	l := acquire(t, m2, "k")
	defer l.Release()
	if l.Client == nil {
		t.Fatal("lease without a client")
	}
	if res, err := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if n := p.Creates.Load(); n != 1 {
		t.Fatalf("%d creations; the recorded sandbox should have been reattached", n)
	}
}

// Two servers sharing a store (Claude Desktop and an IDE on one state
// directory) never make two sandboxes for one workspace.
func TestSharedStoreOneSandboxPerKey(t *testing.T) {
	for range 5 {
		p := managetest.New(t)
		store := manage.NewMemoryStore()
		ms := []*manage.Manager{
			newManager(t, p, func(o *manage.Options) { o.Store = store }),
			newManager(t, p, func(o *manage.Options) { o.Store = store }),
		}
		ids := make(chan string, 8)
		var wg sync.WaitGroup
		for i := range 8 {
			m := ms[i%2]
			wg.Go(func() {
				l, err := m.Acquire(context.Background(), "stdio:proj", true)
				if err != nil {
					t.Error(err)
					return
				}
				ids <- l.Sandbox.ID
				l.Release()
			})
		}
		wg.Wait()
		close(ids)
		seen := map[string]bool{}
		for id := range ids {
			seen[id] = true
		}
		if len(seen) != 1 || p.Creates.Load() != 1 {
			t.Fatalf("two managers on one store made %d sandboxes (%v) for one key", p.Creates.Load(), seen)
		}
	}
}
