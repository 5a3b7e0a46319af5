//go:build linux

package manage_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// keepAliveProvider is a managetest.Provider whose sandboxes need keeping
// alive: each KeepAlive call sends the sandbox id on calls.
type keepAliveProvider struct {
	*managetest.Provider
	interval time.Duration
	calls    chan string
}

func (p *keepAliveProvider) KeepAlive(ctx context.Context, id string) error {
	select {
	case p.calls <- id:
	case <-ctx.Done():
	}
	return nil
}

func (p *keepAliveProvider) KeepAliveInterval() time.Duration { return p.interval }

var _ manage.KeepAliver = (*keepAliveProvider)(nil)

// TestKeepAliveWhileLeaseHeld checks that a KeepAliver provider is asked to
// keep a sandbox alive when a lease is taken and again and again while it is
// held.
func TestKeepAliveWhileLeaseHeld(t *testing.T) {
	p := &keepAliveProvider{Provider: managetest.New(t), interval: time.Millisecond, calls: make(chan string)}
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	for range 3 {
		if id := <-p.calls; id != l.Sandbox.ID {
			t.Fatalf("KeepAlive(%s), want the leased sandbox %s", id, l.Sandbox.ID)
		}
	}
	l.Release()
}

// TestKeepAliveThrottled checks that a lease taken within the interval of
// the last KeepAlive for the same sandbox sends none, and that a new sandbox
// is kept alive at once.
func TestKeepAliveThrottled(t *testing.T) {
	p := &keepAliveProvider{Provider: managetest.New(t), interval: time.Hour, calls: make(chan string, 10)}
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	first := l.Sandbox.ID
	if id := <-p.calls; id != first {
		t.Fatalf("KeepAlive(%s), want %s", id, first)
	}
	l.Release()
	acquire(t, m, "k").Release() // within the interval: no call
	if _, err := m.Reset(t.Context(), "k", false); err != nil {
		t.Fatal(err)
	}
	l = acquire(t, m, "k")
	defer l.Release()
	if l.Sandbox.ID == first {
		t.Fatal("reset kept the sandbox")
	}
	if id := <-p.calls; id != l.Sandbox.ID {
		t.Fatalf("KeepAlive(%s) after a reset, want the new sandbox %s (the throttled lease must not call)", id, l.Sandbox.ID)
	}
}
