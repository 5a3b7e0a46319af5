package manage_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/client"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newManager(t *testing.T, p manage.Provider, mod func(*manage.Options)) *manage.Manager {
	t.Helper()
	opts := manage.Options{Provider: p, AutoRecreate: true, Logger: quiet}
	if mod != nil {
		mod(&opts)
	}
	m, err := manage.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

func acquire(t *testing.T, m *manage.Manager, key string) *manage.Lease {
	t.Helper()
	l, err := m.Acquire(t.Context(), key, false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sh(script string) client.Command {
	return client.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

// counter is a file outside every sandbox that commands append to, so a test
// can count how many times a command really ran.
type counter string

func newCounter(t *testing.T) counter { return counter(filepath.Join(t.TempDir(), "runs")) }

func (c counter) script(then string) string {
	return "echo ran >> " + string(c) + "; " + then
}

func (c counter) count(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(string(c))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(raw), "ran\n")
}

// firstWrite returns a writer that closes ch on its first write.
func firstWrite(ch chan struct{}) io.Writer {
	var once sync.Once
	return writerFunc(func(p []byte) (int, error) {
		once.Do(func() { close(ch) })
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

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

func TestLossWhileIdleIsNotRun(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	runs := newCounter(t)
	l := acquire(t, m, "k")
	id := l.Sandbox.ID
	l.Release()
	if err := p.LoseDaemon(id, false); err != nil {
		t.Fatal(err)
	}

	l = acquire(t, m, "k")
	_, err := l.Client.Run(t.Context(), sh(runs.script("true")), client.RunOptions{})
	err = l.Check(context.Background(), err)
	l.Release()
	le, ok := manage.IsLost(err)
	if !ok {
		t.Fatalf("after the daemon died the call returned %v; want a LostError", err)
	}
	if !le.NotRun || !le.Replaced || le.PrevGeneration != 1 || le.Generation != 2 || le.State != manage.StateGone {
		t.Fatalf("LostError = %+v; want not run, replaced 1 → 2, gone", le)
	}
	if n := runs.count(t); n != 0 {
		t.Fatalf("the command ran %d times; want 0 (never replayed)", n)
	}
	// The next call runs in generation 2, once.
	l = acquire(t, m, "k")
	defer l.Release()
	if l.Generation != 2 {
		t.Fatalf("next call on generation %d, want 2", l.Generation)
	}
	if res, err := l.Client.Run(t.Context(), sh(runs.script("true")), client.RunOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if n := runs.count(t); n != 1 {
		t.Fatalf("command ran %d times; want 1", n)
	}
	if n := p.Creates.Load(); n != 2 {
		t.Fatalf("%d creations, want 2", n)
	}
}

func TestLossMidOperationMayHavePartlyRun(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	runs := newCounter(t)
	l := acquire(t, m, "k")
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		// The command has surely run its side effect once it prints.
		_, err := l.Client.Run(context.Background(), sh(runs.script("echo started; exec sleep 300")), client.RunOptions{Stdout: firstWrite(started)})
		errc <- l.Check(context.Background(), err)
	}()
	<-started
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	l.Release()
	le, ok := manage.IsLost(err)
	if !ok || le.NotRun || !le.Replaced || le.Generation != 2 {
		t.Fatalf("mid-operation loss gave %v (%+v); want 'may have partly run', replaced with generation 2", err, le)
	}
	l2 := acquire(t, m, "k")
	defer l2.Release()
	if l2.Generation != 2 {
		t.Fatalf("next generation %d, want 2", l2.Generation)
	}
	if n := runs.count(t); n != 1 {
		t.Fatalf("command ran %d times; want exactly 1 (never replayed)", n)
	}
}

func TestFiftyConcurrentFailuresOneReplacement(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	leases := make([]*manage.Lease, 50)
	for i := range leases {
		leases[i] = acquire(t, m, "k")
	}
	if err := p.LoseDaemon(leases[0].Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(leases))
	for i, l := range leases {
		wg.Go(func() {
			defer l.Release()
			_, err := l.Client.Run(context.Background(), sh("true"), client.RunOptions{})
			errs[i] = l.Check(context.Background(), err)
		})
	}
	wg.Wait()
	for i, err := range errs {
		le, ok := manage.IsLost(err)
		if !ok || !le.Replaced || le.Generation != 2 {
			t.Errorf("call %d: %v; want the one replacement, generation 2", i, err)
		}
	}
	if n := p.Creates.Load(); n != 2 {
		t.Fatalf("%d creations; want 2 (the first and exactly one replacement)", n)
	}
	if live := p.Live(); len(live) != 1 {
		t.Fatalf("%d live sandboxes, want 1", len(live))
	}
}

func TestInconclusiveInfoReplacesNothing(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	defer l.Release()
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	p.SetInfoError(errors.New("provider API unreachable"))
	_, runErr := l.Client.Run(t.Context(), sh("true"), client.RunOptions{})
	err := l.Check(context.Background(), runErr)
	if _, lost := manage.IsLost(err); lost || err != runErr {
		t.Fatalf("Check with an inconclusive Info = %v; want the original error %v", err, runErr)
	}
	if n := p.Creates.Load(); n != 1 {
		t.Fatalf("%d creations after an inconclusive check, want 1", n)
	}
	if g := m.Generation("k"); g != 1 {
		t.Fatalf("generation %d, want 1", g)
	}
}

func TestHangingProviderIsBounded(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, func(o *manage.Options) { o.CallTimeout = 200 * time.Millisecond })
	l := acquire(t, m, "k")
	defer l.Release()
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	p.SetInfoHang(true)
	_, runErr := l.Client.Run(t.Context(), sh("true"), client.RunOptions{})
	// Check returns (the Info call is bounded by CallTimeout) with the
	// original error; no replacement.
	if err := l.Check(context.Background(), runErr); err != runErr {
		t.Fatalf("Check with a hanging Info = %v; want the original error", err)
	}
}

// lockSignalStore reports every creation-lock request, so a test knows a
// creation has started (and is about to wait for the lock or take it).
type lockSignalStore struct {
	manage.Store
	requested chan string
}

func (s lockSignalStore) Lock(ctx context.Context, key string) (func(), error) {
	s.requested <- key
	return s.Store.Lock(ctx, key)
}

func TestResetDuringRecreationDiscardsReplacement(t *testing.T) {
	p := managetest.New(t)
	store := lockSignalStore{Store: manage.NewMemoryStore(), requested: make(chan string, 8)}
	m := newManager(t, p, func(o *manage.Options) { o.Store = store })
	l := acquire(t, m, "k")
	<-store.requested // the first creation
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	waiting, release := p.BlockCreate()
	_, runErr := l.Client.Run(t.Context(), sh("true"), client.RunOptions{})
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
	le, ok := manage.IsLost(err)
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

func TestStoppedSandboxRestartsWithFilesKept(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	if err := l.Client.Upload(t.Context(), "keep.txt", strings.NewReader("x"), client.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.LoseDaemon(l.Sandbox.ID, true); err != nil {
		t.Fatal(err)
	}
	_, err := l.Client.Stat(t.Context(), "keep.txt")
	err = l.Check(context.Background(), err)
	l.Release()
	le, ok := manage.IsLost(err)
	if !ok || !le.FilesKept || !le.Replaced || le.Generation != 2 {
		t.Fatalf("stopped sandbox: %v (%+v); want restarted with files kept, generation 2", err, le)
	}
	l = acquire(t, m, "k")
	defer l.Release()
	if _, err := l.Client.Stat(t.Context(), "keep.txt"); err != nil {
		t.Fatalf("file lost across the restart: %v", err)
	}
}

func TestAutoRecreateOff(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, func(o *manage.Options) { o.AutoRecreate = false })
	l := acquire(t, m, "k")
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	_, err := l.Client.Run(t.Context(), sh("true"), client.RunOptions{})
	err = l.Check(context.Background(), err)
	l.Release()
	if le, ok := manage.IsLost(err); !ok || le.Replaced {
		t.Fatalf("loss with auto-recreate off = %v; want lost, not replaced", err)
	}
	if _, err := m.Acquire(t.Context(), "k", false); err == nil {
		t.Fatal("Acquire of a lost workspace succeeded with auto-recreate off")
	} else if le, ok := manage.IsLost(err); !ok || !le.NotRun {
		t.Fatalf("Acquire of a lost workspace = %v; want a not-run LostError", err)
	}
	if n := p.Creates.Load(); n != 1 {
		t.Fatalf("%d creations, want 1", n)
	}
	if _, err := m.Reset(t.Context(), "k", false); err != nil {
		t.Fatal(err)
	}
	acquire(t, m, "k").Release()
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
	if res, err := l.Client.Run(t.Context(), sh("true"), client.RunOptions{}); err != nil || res.ExitCode != 0 {
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
	if err := l.Client.Upload(t.Context(), "notes.txt", strings.NewReader("kept"), client.UploadOptions{}); err != nil {
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
	le, ok := manage.IsLost(err)
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

// hookProvider wraps a provider to inject faults into single calls.
type hookProvider struct {
	manage.Provider
	mu       sync.Mutex
	endpoint func() error // called before Endpoint; an error fails it
	info     func(ctx context.Context) error
	create   func() error
}

func (h *hookProvider) hook(get func(*hookProvider) func() error) error {
	h.mu.Lock()
	f := get(h)
	h.mu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

func (h *hookProvider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	if err := h.hook(func(h *hookProvider) func() error { return h.endpoint }); err != nil {
		return manage.Endpoint{}, err
	}
	return h.Provider.Endpoint(ctx, id)
}

func (h *hookProvider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	h.mu.Lock()
	f := h.info
	h.mu.Unlock()
	if f != nil {
		if err := f(ctx); err != nil {
			return manage.Sandbox{}, err
		}
	}
	return h.Provider.Info(ctx, id)
}

func (h *hookProvider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	if err := h.hook(func(h *hookProvider) func() error { return h.create }); err != nil {
		return manage.Sandbox{}, err
	}
	return h.Provider.Create(ctx, cfg)
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
	if res, err := l.Client.Run(t.Context(), sh("true"), client.RunOptions{}); err != nil || res.ExitCode != 0 {
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
	_, runErr := l.Client.Run(t.Context(), sh("true"), client.RunOptions{})
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
	if le, ok := manage.IsLost(err); !ok || le.Replaced {
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

// A loss check whose caller gave up returns at once with the original
// error; the replacement it started still completes for the next call.
func TestCheckEndsWithItsContext(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	waiting, release := p.BlockCreate()
	_, runErr := l.Client.Run(t.Context(), sh("true"), client.RunOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	checked := make(chan error, 1)
	go func() { checked <- l.Check(ctx, runErr) }()
	<-waiting // the replacement is being created
	cancel()
	if err := <-checked; err != runErr {
		t.Fatalf("Check after its context ended = %v; want the original error", err)
	}
	l.Release()
	release()
	l = acquire(t, m, "k")
	defer l.Release()
	if l.Generation != 2 {
		t.Fatalf("the replacement was not published: generation %d", l.Generation)
	}
}
