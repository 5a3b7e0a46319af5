//go:build linux

package manage_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/holders"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// sharingManagers returns n Managers on one provider and one store, each
// with its own Holders on one directory, as n servers on one state
// directory have.
func sharingManagers(t *testing.T, p manage.Provider, n int) []*manage.Manager {
	t.Helper()
	store := manage.NewMemoryStore()
	root := t.TempDir()
	ms := make([]*manage.Manager, n)
	for i := range ms {
		h, err := holders.New(root)
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = newManager(t, p, func(o *manage.Options) { o.Store, o.Holders = store, h })
	}
	return ms
}

func sandboxState(t *testing.T, p manage.Provider, id string) manage.State {
	t.Helper()
	info, err := p.Info(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// A named workspace's sandbox is paused when the last of the servers holding
// it ends its session, whatever the order they leave in, and neither a Pause
// nor an ended session of one pauses it while another holds it.
func TestNamedWorkspacePausedByLastHolder(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2}, {2, 0, 1}, {1, 2, 0}} {
		p := managetest.New(t)
		ms := sharingManagers(t, p, 3)
		var id string
		for _, m := range ms {
			l, err := m.Acquire(t.Context(), "stdio:shared", true)
			if err != nil {
				t.Fatal(err)
			}
			if id == "" {
				id = l.Sandbox.ID
			} else if l.Sandbox.ID != id {
				t.Fatalf("servers got sandboxes %s and %s", id, l.Sandbox.ID)
			}
			l.Release()
		}
		if err := ms[order[0]].Pause(t.Context(), "stdio:shared"); err != nil {
			t.Fatal(err)
		}
		if got := sandboxState(t, p, id); got != manage.StateRunning {
			t.Fatalf("order %v: Pause while others hold: %s, want running", order, got)
		}
		for i, k := range order {
			if err := ms[k].EndSession(context.Background(), "stdio:shared"); err != nil {
				t.Fatal(err)
			}
			want := manage.StateRunning
			if i == len(order)-1 {
				want = manage.StatePaused
			}
			if got := sandboxState(t, p, id); got != want {
				t.Fatalf("order %v: after %d left: %s, want %s", order, i+1, got, want)
			}
		}
		// A server coming back resumes it.
		l, err := ms[order[0]].Acquire(t.Context(), "stdio:shared", true)
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		if got := sandboxState(t, p, id); got != manage.StateRunning {
			t.Fatalf("order %v: after a server came back: %s, want running", order, got)
		}
	}
}

// An anonymous workspace is killed with its session, holders or not.
func TestAnonymousWorkspaceKilledWithSession(t *testing.T) {
	p := managetest.New(t)
	ms := sharingManagers(t, p, 2)
	l, err := ms[0].Acquire(t.Context(), "http:session", false)
	if err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	l.Release()
	if err := ms[0].EndSession(t.Context(), "http:session"); err != nil {
		t.Fatal(err)
	}
	if got := sandboxState(t, p, id); got != manage.StateGone {
		t.Fatalf("anonymous sandbox after its session: %s, want gone", got)
	}
}

// A server that paused the sandbox while it was the only holder still pauses
// it when it leaves, after another server resumed it and left it running.
func TestNamedWorkspacePausedAgainByLastHolder(t *testing.T) {
	p := managetest.New(t)
	ms := sharingManagers(t, p, 2)
	l, err := ms[0].Acquire(t.Context(), "stdio:shared", true)
	if err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	l.Release()
	if err := ms[0].Pause(t.Context(), "stdio:shared"); err != nil {
		t.Fatal(err)
	}
	if got := sandboxState(t, p, id); got != manage.StatePaused {
		t.Fatalf("paused by its only holder: %s", got)
	}
	l, err = ms[1].Acquire(t.Context(), "stdio:shared", true)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if err := ms[1].EndSession(t.Context(), "stdio:shared"); err != nil {
		t.Fatal(err)
	}
	if got := sandboxState(t, p, id); got != manage.StateRunning {
		t.Fatalf("after the second server left while the first holds it: %s, want running", got)
	}
	if err := ms[0].EndSession(t.Context(), "stdio:shared"); err != nil {
		t.Fatal(err)
	}
	if got := sandboxState(t, p, id); got != manage.StatePaused {
		t.Fatalf("after the last holder left: %s, want paused", got)
	}
}

// fixedHolders is a Holders whose Others answer is set by the test; Hold
// registers nothing.
type fixedHolders struct{ others bool }

func (fixedHolders) Hold(string) (func(), error)   { return func() {}, nil }
func (h fixedHolders) Others(string) (bool, error) { return h.others, nil }

// A named workspace's sandbox left running by a server that ended without
// pausing it (killed) is paused by the next reaper pass of another server,
// unless some server still holds it.
func TestReapPausesOrphans(t *testing.T) {
	p := managetest.New(t)
	store := manage.NewMemoryStore()
	gone := newManager(t, p, func(o *manage.Options) { o.Store = store })
	l, err := gone.Acquire(t.Context(), "stdio:orphan", true)
	if err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	l.Release()
	held := newManager(t, p, func(o *manage.Options) {
		o.Store, o.Holders, o.PausedTTL = store, fixedHolders{others: true}, time.Hour
	})
	held.Reap(t.Context())
	if got := sandboxState(t, p, id); got != manage.StateRunning {
		t.Fatalf("a sandbox a server holds after a reaper pass: %s, want running", got)
	}
	free := newManager(t, p, func(o *manage.Options) {
		o.Store, o.Holders, o.PausedTTL = store, fixedHolders{}, time.Hour
	})
	free.Reap(t.Context())
	if got := sandboxState(t, p, id); got != manage.StatePaused {
		t.Fatalf("a sandbox nobody holds after a reaper pass: %s, want paused", got)
	}
	if rec, ok, err := store.Get(t.Context(), "stdio:orphan"); err != nil || !ok || rec.State != manage.StatePaused || rec.PausedAt.IsZero() {
		t.Fatalf("record after the orphan was paused: %+v, %v, %v", rec, ok, err)
	}
}

// signalHandler is a slog.Handler that closes seen once a record with
// message msg is logged.
type signalHandler struct {
	msg  string
	once *sync.Once
	seen chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// The idle pause of one server leaves a sandbox another server holds
// running: the other's calls go on.
func TestIdlePauseLeavesSharedSandboxRunning(t *testing.T) {
	p := managetest.New(t)
	store := manage.NewMemoryStore()
	root := t.TempDir()
	skipped := signalHandler{msg: "another server uses the sandbox; leaving it running", once: &sync.Once{}, seen: make(chan struct{})}
	var ms []*manage.Manager
	for i, idle := range []time.Duration{time.Millisecond, 0} {
		h, err := holders.New(root)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, newManager(t, p, func(o *manage.Options) {
			o.Store, o.Holders, o.IdlePause = store, h, idle
			if i == 0 {
				o.Logger = slog.New(skipped)
			}
		}))
	}
	other, err := ms[1].Acquire(t.Context(), "stdio:shared", true)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	l, err := ms[0].Acquire(t.Context(), "stdio:shared", true)
	if err != nil {
		t.Fatal(err)
	}
	l.Release() // starts the first server's idle clock
	select {
	case <-skipped.seen:
	case <-t.Context().Done():
		t.Fatal("the idle pause never ran")
	}
	if got := sandboxState(t, p, other.Sandbox.ID); got != manage.StateRunning {
		t.Fatalf("after the first server's idle pause: %s, want running", got)
	}
	if _, err := other.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{}); err != nil {
		t.Fatalf("the other server's call after the idle pause: %v", err)
	}
}

// Two servers leaving at once: one of them pauses the sandbox.
func TestNamedWorkspaceHoldersLeavingAtOnce(t *testing.T) {
	p := managetest.New(t)
	ms := sharingManagers(t, p, 2)
	var id string
	for _, m := range ms {
		l, err := m.Acquire(t.Context(), "stdio:shared", true)
		if err != nil {
			t.Fatal(err)
		}
		id = l.Sandbox.ID
		l.Release()
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			if err := m.EndSession(context.Background(), "stdio:shared"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := sandboxState(t, p, id); got != manage.StatePaused {
		t.Fatalf("after both servers left at once: %s, want paused", got)
	}
}
