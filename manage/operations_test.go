//go:build linux

package manage_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

func TestResetDuringRecreationDiscardsReplacement(t *testing.T) {
	p := managetest.New(t)
	store := lockSignalStore{Store: manage.NewMemoryStore(), requested: make(chan string, 8)}
	m := newManager(t, p, func(o *manage.Options) { o.Store = store })
	l := acquire(t, m, "k")
	// The first acquire's locks (the load's read of the record, then its
	// creation) are all taken once it returned: drain them, so the waits
	// below see only the replacement's and the reset's.
	for drained := false; !drained; {
		select {
		case <-store.requested:
		default:
			drained = true
		}
	}
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	waiting, release := p.BlockCreate()
	_, runErr := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{})
	checked := make(chan error, 1)
	go func() { checked <- l.Check(context.Background(), runErr) }()
	<-store.requested // the replacement's creation holds the lock…
	<-waiting         // …and is inside the provider's Create

	resetDone := make(chan error, 1)
	var gen int64
	go func() {
		var err error
		gen, err = m.Reset(context.Background(), "k", false)
		resetDone <- err
	}()
	<-store.requested // the reset has started its own creation (after marking the workspace changed)
	release()
	if err := <-resetDone; err != nil {
		t.Fatal(err)
	}
	err := <-checked
	l.Release()
	le, ok := manage.AsLost(err)
	if !ok || le.Replaced || le.ReplaceErr == nil {
		t.Fatalf("the loss check = %v (%+v); want lost, not replaced (reset won)", err, le)
	}
	// Only the reset's sandbox is alive: the unpublished replacement was destroyed.
	live := p.Live()
	if len(live) != 1 {
		t.Fatalf("%d live sandboxes after reset-during-recreation, want 1: %v", len(live), live)
	}
	if n := p.Creates.Load(); n != 3 {
		t.Fatalf("%d creations, want 3 (first, discarded replacement, reset)", n)
	}
	l2 := acquire(t, m, "k")
	defer l2.Release()
	if l2.Generation != gen || l2.Sandbox.ID != live[0] {
		t.Fatalf("published generation %d sandbox %s; want the reset's %d %s", l2.Generation, l2.Sandbox.ID, gen, live[0])
	}
}

func TestIdlePauseThenTransparentResume(t *testing.T) {
	p := managetest.New(t)
	paused := p.PauseEvents()
	m := newManager(t, p, func(o *manage.Options) { o.IdlePause = 10 * time.Millisecond })
	l := acquire(t, m, "k")
	id := l.Sandbox.ID
	l.Release() // starts the idle clock
	if got := <-paused; got != id {
		t.Fatalf("paused %s, want %s", got, id)
	}
	// The pause flight may still be recording its result; the next Acquire
	// waits for it, then resumes.
	l = acquire(t, m, "k")
	defer l.Release()
	var resumed bool
	for _, ev := range l.Events {
		resumed = resumed || ev.Kind == manage.EventResumed
	}
	if !resumed || l.Generation != 1 || l.Sandbox.ID != id {
		t.Fatalf("after idle pause: events %+v gen %d; want a resumed event on generation 1", l.Events, l.Generation)
	}
	if res, err := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
}

func TestEndSessionPolicy(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	anon, err := m.Acquire(t.Context(), "anon", false)
	if err != nil {
		t.Fatal(err)
	}
	anon.Release()
	named, err := m.Acquire(t.Context(), "named", true)
	if err != nil {
		t.Fatal(err)
	}
	named.Release()
	if err := m.EndSession(t.Context(), "anon"); err != nil {
		t.Fatal(err)
	}
	if err := m.EndSession(t.Context(), "named"); err != nil {
		t.Fatal(err)
	}
	info, _ := p.Info(t.Context(), anon.Sandbox.ID)
	if info.State != manage.StateGone {
		t.Errorf("anonymous sandbox after session end: %s, want gone", info.State)
	}
	info, _ = p.Info(t.Context(), named.Sandbox.ID)
	if info.State != manage.StatePaused {
		t.Errorf("named sandbox after session end: %s, want paused", info.State)
	}
}

func TestReaperKillsLongPausedSandboxes(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, func(o *manage.Options) { o.PausedTTL = time.Nanosecond })
	l, err := m.Acquire(t.Context(), "named", true)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if err := m.Pause(t.Context(), "named"); err != nil {
		t.Fatal(err)
	}
	if n := m.Reap(t.Context()); n != 1 {
		t.Fatalf("reaped %d, want 1", n)
	}
	// The next call learns of the loss: the command was not run.
	_, err = m.Acquire(t.Context(), "named", true)
	le, ok := manage.AsLost(err)
	if !ok || !le.NotRun || !le.Replaced {
		t.Fatalf("Acquire after reaping = %v; want a not-run LostError with a replacement", err)
	}
}

// Reset of a workspace this process has not used yet destroys the sandbox
// an earlier run recorded, and continues its generations.
func TestResetOfARecordedWorkspace(t *testing.T) {
	p := managetest.New(t)
	store := manage.NewMemoryStore()
	m1 := newManager(t, p, func(o *manage.Options) { o.Store = store })
	l := acquire(t, m1, "k")
	old := l.Sandbox.ID
	l.Release()
	m2 := newManager(t, p, func(o *manage.Options) { o.Store = store })
	gen, err := m2.Reset(t.Context(), "k", false)
	if err != nil {
		t.Fatal(err)
	}
	if gen != 2 {
		t.Fatalf("generation after reset = %d, want 2", gen)
	}
	if info, _ := p.Info(t.Context(), old); info.State != manage.StateGone {
		t.Fatalf("the recorded sandbox %s is %s after reset, want gone", old, info.State)
	}
}

// A loss check that finishes after a Reset published its sandbox must not
// undo the Reset, even when its own replacement fails: the Reset's sandbox
// stays the workspace's, and nothing is orphaned.
func TestLateLossCheckCannotUndoReset(t *testing.T) {
	p := managetest.New(t)
	hp := &hookProvider{Provider: p}
	m := newManager(t, hp, nil)
	l := acquire(t, m, "k")
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hp.mu.Lock()
	hp.info = func(ctx context.Context) error {
		once.Do(func() {
			close(entered)
			<-release
		})
		return nil
	}
	hp.mu.Unlock()
	_, runErr := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{})
	checked := make(chan error, 1)
	go func() { checked <- l.Check(context.Background(), runErr) }()
	<-entered // the loss check waits in Info

	gen, err := m.Reset(t.Context(), "k", false)
	if err != nil {
		t.Fatal(err)
	}
	hp.mu.Lock()
	hp.create = func() error { return errors.New("no capacity") }
	hp.mu.Unlock()
	close(release)
	err = <-checked
	l.Release()
	if le, ok := manage.AsLost(err); !ok || le.Replaced {
		t.Fatalf("late loss check = %v; want lost, not replaced", err)
	}
	hp.mu.Lock()
	hp.create = nil
	hp.mu.Unlock()
	l2 := acquire(t, m, "k")
	defer l2.Release()
	live := p.Live()
	if l2.Generation != gen || len(live) != 1 || live[0] != l2.Sandbox.ID {
		t.Fatalf("after reset then a late failed replacement: generation %d (reset made %d), live %v, lease on %s", l2.Generation, gen, live, l2.Sandbox.ID)
	}
}
