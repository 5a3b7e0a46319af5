//go:build linux

package manage_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// twoServers returns two Managers sharing one store and one provider, as
// two replicas sharing a Redis and a management server would.
func twoServers(t *testing.T, p manage.Provider, store manage.Store, mod func(*manage.Options)) (a, b *manage.Manager) {
	t.Helper()
	with := func(o *manage.Options) {
		o.Store = store
		if mod != nil {
			mod(o)
		}
	}
	return newManager(t, p, with), newManager(t, p, with)
}

func stateOf(t *testing.T, p manage.Provider, id string) manage.State {
	t.Helper()
	info, err := p.Info(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// A server shutting down pauses the named workspaces it served, unless
// another server sharing the store served the sandbox since: then it is
// left running for that server (whose own end of session pauses it).
func TestShutdownLeavesSandboxServedElsewhere(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		store := manage.NewMemoryStore()
		shutdownLeavesSandboxServedElsewhere(t, store, store)
	})
	t.Run("bolt", func(t *testing.T) {
		// Two stores on one state directory: two processes on one machine.
		dir := t.TempDir()
		shutdownLeavesSandboxServedElsewhere(t, openBolt(t, dir), openBolt(t, dir))
	})
}

func openBolt(t *testing.T, dir string) manage.Store {
	t.Helper()
	s, err := boltstore.Open(dir, boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func shutdownLeavesSandboxServedElsewhere(t *testing.T, storeA, storeB manage.Store) {
	p := managetest.New(t)
	hour := func(o *manage.Options) { o.IdlePause = time.Hour }
	a := newManager(t, p, func(o *manage.Options) { o.Store = storeA; hour(o) })
	b := newManager(t, p, func(o *manage.Options) { o.Store = storeB; hour(o) })
	la, err := a.Acquire(t.Context(), "w", true)
	if err != nil {
		t.Fatal(err)
	}
	id := la.Sandbox.ID
	la.Release()
	lb, err := b.Acquire(t.Context(), "w", true) // B reaches A's sandbox: activity
	if err != nil {
		t.Fatal(err)
	}
	if lb.Sandbox.ID != id {
		t.Fatalf("B got sandbox %s, A made %s", lb.Sandbox.ID, id)
	}
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, p, id); st != manage.StateRunning {
		t.Fatalf("after A shut down, with B in a call: %s; want running", st)
	}
	lb.Release()
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, p, id); st != manage.StatePaused {
		t.Fatalf("after B, the last to serve it, shut down: %s; want paused", st)
	}
}

// A server whose call comes after another server paused the sandbox reads
// the record before sending anything, and resumes it: the call goes ahead
// on the same sandbox and generation, told it was resumed.
func TestCallResumesSandboxPausedElsewhere(t *testing.T) {
	p := managetest.New(t)
	store := manage.NewMemoryStore()
	// Every call records its activity (and reads the record).
	a, b := twoServers(t, p, store, func(o *manage.Options) { o.ActivityInterval = time.Nanosecond })
	lb, err := b.Acquire(t.Context(), "w", true)
	if err != nil {
		t.Fatal(err)
	}
	id := lb.Sandbox.ID
	lb.Release()
	la, err := a.Acquire(t.Context(), "w", true) // A served last
	if err != nil {
		t.Fatal(err)
	}
	la.Release()
	if err := a.Pause(t.Context(), "w"); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, p, id); st != manage.StatePaused {
		t.Fatalf("A, which served last, did not pause: %s", st)
	}
	lb, err = b.Acquire(t.Context(), "w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release()
	resumed := false
	for _, ev := range lb.Events {
		resumed = resumed || ev.Kind == manage.EventResumed
	}
	if !resumed || lb.Sandbox.ID != id || lb.Generation != 1 {
		t.Fatalf("B's call after A paused: events %+v, sandbox %s gen %d; want resumed, %s gen 1", lb.Events, lb.Sandbox.ID, lb.Generation, id)
	}
	if st := stateOf(t, p, id); st != manage.StateRunning {
		t.Fatalf("after B's call: %s; want running", st)
	}
	rec, _, err := store.Get(t.Context(), "w")
	if err != nil || rec.State != manage.StateRunning || rec.SandboxID != id {
		t.Fatalf("record after B resumed: %+v, %v", rec, err)
	}
	// A's next call finds it running (resumed by B) and goes ahead.
	la, err = a.Acquire(t.Context(), "w", true)
	if err != nil {
		t.Fatal(err)
	}
	la.Release()
}

// activityStore is a Store that reports every record Put whose LastActive
// moved forward, so a test can wait for activity being recorded.
type activityStore struct {
	manage.Store
	recorded chan time.Time
}

func (s *activityStore) Put(ctx context.Context, rec manage.Record) error {
	prev, ok, _ := s.Get(ctx, rec.Key)
	err := s.Store.Put(ctx, rec)
	if err == nil && rec.State == manage.StateRunning && (!ok || rec.LastActive.After(prev.LastActive)) {
		select {
		case s.recorded <- rec.LastActive:
		default:
		}
	}
	return err
}

// A server's idle pause leaves a sandbox alone while another server is in
// a call on it (that server records its activity every interval during the
// call); once that call ends, the sandbox is paused after the idle pause.
func TestIdlePauseWaitsForCallElsewhere(t *testing.T) {
	p := managetest.New(t)
	paused := p.PauseEvents()
	store := &activityStore{Store: manage.NewMemoryStore(), recorded: make(chan time.Time, 1)}
	const idle = 400 * time.Millisecond // activity recorded every 100ms
	a, b := twoServers(t, p, store, func(o *manage.Options) { o.IdlePause = idle })
	la, err := a.Acquire(t.Context(), "w", true)
	if err != nil {
		t.Fatal(err)
	}
	id := la.Sandbox.ID
	la.Release() // A's idle clock starts
	lb, err := b.Acquire(t.Context(), "w", true)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until B's call has lasted well past A's idle pause (and past
	// the time A waits after B's recorded activity), as told by B's
	// recorded activity, then check nothing was paused.
	start := time.Now().UTC()
	for last := start; last.Sub(start) < 3*idle; {
		last = <-store.recorded
	}
	select {
	case got := <-paused:
		t.Fatalf("sandbox %s paused while B was in a call on it", got)
	default:
	}
	if st := stateOf(t, p, id); st != manage.StateRunning {
		t.Fatalf("during B's call: %s; want running", st)
	}
	lb.Release()
	if got := <-paused; got != id {
		t.Fatalf("paused %s, want %s", got, id)
	}
}
