//go:build linux

package managetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// ownerCounter is a Provider that counts each owner's live sandboxes and
// the most it ever had at once, to show a limit held at every moment, not
// only at the end.
type ownerCounter struct {
	*Provider

	mu    sync.Mutex
	owner map[string]string // sandbox id → owner
	live  map[string]int
	peak  map[string]int
}

func (c *ownerCounter) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	sb, err := c.Provider.Create(ctx, cfg)
	if err == nil {
		owner := OwnerBeforeSlash(cfg.Key)
		c.mu.Lock()
		c.owner[sb.ID] = owner
		c.live[owner]++
		c.peak[owner] = max(c.peak[owner], c.live[owner])
		c.mu.Unlock()
	}
	return sb, err
}

func (c *ownerCounter) Kill(ctx context.Context, id string) error {
	c.mu.Lock()
	if owner, ok := c.owner[id]; ok {
		delete(c.owner, id)
		c.live[owner]--
	}
	c.mu.Unlock()
	return c.Provider.Kill(ctx, id)
}

func (c *ownerCounter) counts(owner string) (live, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[owner], c.peak[owner]
}

// NewServers returns two Managers (two servers, or replicas) on provider p
// that share one store, each with its Options changed by mod.
type NewServers func(t *testing.T, p manage.Provider, mod func(*manage.Options)) (a, b *manage.Manager)

// SandboxLimitAcrossServers checks Options.MaxSandboxesPerOwner (4, owners
// by OwnerBeforeSlash) over two servers sharing a store: an owner at the
// limit on one server is refused on the other, with the error the model
// reads; concurrent first calls over both end with exactly the limit's
// sandboxes, at no moment more, and none left held by refused calls; and an
// owner hammering both servers neither gets past the limit nor keeps
// another owner from its sandboxes.
func SandboxLimitAcrossServers(t *testing.T, newServers NewServers) {
	const limit = 4
	setup := func(t *testing.T) (a, b *manage.Manager, c *ownerCounter) {
		c = &ownerCounter{Provider: New(t), owner: map[string]string{}, live: map[string]int{}, peak: map[string]int{}}
		a, b = newServers(t, c, func(o *manage.Options) {
			o.MaxSandboxesPerOwner = limit
			o.OwnerOf = OwnerBeforeSlash
		})
		return a, b, c
	}
	acquire := func(m *manage.Manager, key string) error {
		l, err := m.Acquire(context.Background(), key, false)
		if err == nil {
			l.Release()
		}
		return err
	}
	t.Run("AtLimitOnOneRefusedOnOther", func(t *testing.T) {
		a, b, c := setup(t)
		for i := range limit {
			if err := acquire(a, fmt.Sprintf("alice/%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		err := acquire(b, "alice/one-more")
		var le *manage.LimitError
		if !errors.As(err, &le) || connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("alice's fifth workspace, on the other server: %v; want a FailedPrecondition LimitError", err)
		}
		if le.Owner != "alice" || le.Max != limit || le.Held != limit || !strings.Contains(err.Error(), fmt.Sprintf("--max-sandboxes-per-principal %d", limit)) || !strings.Contains(err.Error(), "end an MCP session") {
			t.Fatalf("limit error = %v (%+v)", err, le)
		}
		if err := acquire(b, "bob/0"); err != nil {
			t.Fatalf("bob on the other server: %v", err)
		}
		// A workspace that holds a slot is reset on the other server.
		if _, err := b.Reset(context.Background(), "alice/0", false); err != nil {
			t.Fatalf("reset of alice/0 on the other server: %v", err)
		}
		// Ending a session on one server frees its slot for the other.
		if err := a.EndSession(context.Background(), "alice/1"); err != nil {
			t.Fatal(err)
		}
		if err := acquire(b, "alice/one-more"); err != nil {
			t.Fatalf("after a slot was freed on the other server: %v", err)
		}
		if live, peak := c.counts("alice"); live != limit || peak > limit {
			t.Fatalf("alice has %d live sandboxes, %d at most; want %d, never more", live, peak, limit)
		}
	})
	t.Run("ConcurrentFirstCalls", func(t *testing.T) {
		a, b, c := setup(t)
		const perServer = 10
		errs := make([]error, 2*perServer)
		var wg sync.WaitGroup
		for i := range errs {
			m := []*manage.Manager{a, b}[i%2]
			wg.Go(func() { errs[i] = acquire(m, fmt.Sprintf("alice/%d", i)) })
		}
		wg.Wait()
		var held []int
		for i, err := range errs {
			switch {
			case err == nil:
				held = append(held, i)
			case !manage.IsLimit(err):
				t.Errorf("alice/%d: %v", i, err)
			}
		}
		live, peak := c.counts("alice")
		if len(held) != limit || live != limit || peak > limit {
			t.Fatalf("%d concurrent first calls over two servers: %d got a sandbox, %d live, %d at most; want %d, never more", len(errs), len(held), live, peak, limit)
		}
		// The refused calls hold nothing: one slot freed (its session ended
		// on the server that served it) makes room for exactly one more, on
		// either server.
		if err := []*manage.Manager{a, b}[held[0]%2].EndSession(context.Background(), fmt.Sprintf("alice/%d", held[0])); err != nil {
			t.Fatal(err)
		}
		if err := acquire(a, "alice/after"); err != nil {
			t.Fatalf("after a slot was freed: %v", err)
		}
		if err := acquire(b, "alice/after-that"); !manage.IsLimit(err) {
			t.Fatalf("one more past the limit: %v; want a LimitError", err)
		}
	})
	t.Run("HammeringOwner", func(t *testing.T) {
		a, b, c := setup(t)
		const workers, attempts = 16, 4
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := 0
		for w := range workers {
			m := []*manage.Manager{a, b}[w%2]
			wg.Go(func() {
				for i := range attempts {
					err := acquire(m, fmt.Sprintf("mallory/%d-%d", w, i))
					switch {
					case err == nil:
						mu.Lock()
						got++
						mu.Unlock()
					case !manage.IsLimit(err):
						t.Errorf("mallory: %v", err)
					}
				}
			})
		}
		bobErrs := make([]error, limit)
		for i := range bobErrs {
			m := []*manage.Manager{a, b}[i%2]
			wg.Go(func() { bobErrs[i] = acquire(m, fmt.Sprintf("bob/%d", i)) })
		}
		wg.Wait()
		for i, err := range bobErrs {
			if err != nil {
				t.Errorf("bob/%d, while mallory hammers: %v", i, err)
			}
		}
		live, peak := c.counts("mallory")
		if got != limit || live != limit || peak > limit {
			t.Fatalf("mallory's %d calls over two servers: %d got a sandbox, %d live, %d at most; want %d, never more", workers*attempts, got, live, peak, limit)
		}
		if live, _ := c.counts("bob"); live != limit {
			t.Fatalf("bob has %d sandboxes, want %d", live, limit)
		}
	})
}
