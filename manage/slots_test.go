//go:build linux

package manage_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// TestSandboxesPerOwnerHoldAcrossConcurrentFirstCalls starts twelve first
// calls of one owner at once, each for its own workspace, under a limit of
// four: exactly four get a sandbox, the others a LimitError, and no more
// sandboxes than that were made; another owner is unaffected, and a
// workspace already holding a slot can still be reset.
func TestSandboxesPerOwnerHoldAcrossConcurrentFirstCalls(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, func(o *manage.Options) {
		o.MaxSandboxesPerOwner = 4
		o.OwnerOf = managetest.OwnerBeforeSlash
	})
	const calls = 12
	var wg sync.WaitGroup
	errs := make([]error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Acquire(t.Context(), "alice/"+string(rune('a'+i)), true)
			if err == nil {
				l.Release()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	ok, limited := 0, 0
	for _, err := range errs {
		var le *manage.LimitError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &le):
			limited++
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("limit error has code %v, want FailedPrecondition", connect.CodeOf(err))
			}
			if le.Max != 4 || le.Owner != "alice" || !strings.Contains(err.Error(), "--max-sandboxes-per-principal 4") {
				t.Errorf("limit error = %v (%+v)", err, le)
			}
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ok != 4 || limited != calls-4 {
		t.Fatalf("%d calls got a sandbox and %d the limit error; want 4 and %d", ok, limited, calls-4)
	}
	if n := p.Creates.Load(); n != 4 {
		t.Fatalf("the provider made %d sandboxes, want 4", n)
	}
	// Another owner, and keys without an owner, are not counted with alice.
	acquire(t, m, "bob/x").Release()
	acquire(t, m, "nobody").Release()
	// A workspace that holds a slot is reset in it.
	var kept string
	for i, err := range errs {
		if err == nil {
			kept = "alice/" + string(rune('a'+i))
			break
		}
	}
	if _, err := m.Reset(t.Context(), kept, true); err != nil {
		t.Fatalf("reset of %s, which holds a slot: %v", kept, err)
	}
}

// TestSandboxesPerOwnerFreedByEndSession shows a slot coming back when an
// anonymous workspace's session ends (its sandbox is killed and forgotten).
func TestSandboxesPerOwnerFreedByEndSession(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, func(o *manage.Options) {
		o.MaxSandboxesPerOwner = 1
		o.OwnerOf = managetest.OwnerBeforeSlash
	})
	l, err := m.Acquire(t.Context(), "alice/one", false)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := m.Acquire(t.Context(), "alice/two", false); !manage.IsLimit(err) {
		t.Fatalf("second workspace: err = %v, want a LimitError", err)
	}
	if err := m.EndSession(t.Context(), "alice/one"); err != nil {
		t.Fatal(err)
	}
	acquire(t, m, "alice/two").Release()
}

// The limit holds over two servers sharing one store: one MemoryStore (two
// Managers in one process), and two bolt stores on one state directory (two
// processes on one machine, which the file lock serialises).
func TestSandboxesPerOwnerAcrossServers(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		managetest.SandboxLimitAcrossServers(t, func(t *testing.T, p manage.Provider, mod func(*manage.Options)) (a, b *manage.Manager) {
			return twoServers(t, p, manage.NewMemoryStore(), mod)
		})
	})
	t.Run("bolt", func(t *testing.T) {
		managetest.SandboxLimitAcrossServers(t, func(t *testing.T, p manage.Provider, mod func(*manage.Options)) (a, b *manage.Manager) {
			dir := t.TempDir()
			storeA, storeB := openBolt(t, dir), openBolt(t, dir)
			a = newManager(t, p, func(o *manage.Options) { o.Store = storeA; mod(o) })
			b = newManager(t, p, func(o *manage.Options) { o.Store = storeB; mod(o) })
			return a, b
		})
	})
}
