//go:build linux

package manage_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

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
	_, err := l.Client.Run(t.Context(), sh(runs.script("true")), envdclient.RunOptions{})
	err = l.Check(context.Background(), err)
	l.Release()
	le, ok := manage.AsLost(err)
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
	if res, err := l.Client.Run(t.Context(), sh(runs.script("true")), envdclient.RunOptions{}); err != nil || res.ExitCode != 0 {
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
		_, err := l.Client.Run(context.Background(), sh(runs.script("echo started; exec sleep 300")), envdclient.RunOptions{Stdout: firstWrite(started)})
		errc <- l.Check(context.Background(), err)
	}()
	<-started
	if err := p.LoseDaemon(l.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	l.Release()
	le, ok := manage.AsLost(err)
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
			_, err := l.Client.Run(context.Background(), sh("true"), envdclient.RunOptions{})
			errs[i] = l.Check(context.Background(), err)
		})
	}
	wg.Wait()
	for i, err := range errs {
		le, ok := manage.AsLost(err)
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
	_, runErr := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{})
	err := l.Check(context.Background(), runErr)
	if manage.IsLost(err) || err != runErr {
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
	_, runErr := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{})
	// Check returns (the Info call is bounded by CallTimeout) with the
	// original error; no replacement.
	if err := l.Check(context.Background(), runErr); err != runErr {
		t.Fatalf("Check with a hanging Info = %v; want the original error", err)
	}
}

func TestStoppedSandboxRestartsWithFilesKept(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	if err := l.Client.Upload(t.Context(), "keep.txt", strings.NewReader("x"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := p.LoseDaemon(l.Sandbox.ID, true); err != nil {
		t.Fatal(err)
	}
	_, err := l.Client.Stat(t.Context(), "keep.txt")
	err = l.Check(context.Background(), err)
	l.Release()
	le, ok := manage.AsLost(err)
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
	_, err := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{})
	err = l.Check(context.Background(), err)
	l.Release()
	if le, ok := manage.AsLost(err); !ok || le.Replaced {
		t.Fatalf("loss with auto-recreate off = %v; want lost, not replaced", err)
	}
	if _, err := m.Acquire(t.Context(), "k", false); err == nil {
		t.Fatal("Acquire of a lost workspace succeeded with auto-recreate off")
	} else if le, ok := manage.AsLost(err); !ok || !le.NotRun {
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
	_, runErr := l.Client.Run(t.Context(), sh("true"), envdclient.RunOptions{})
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

// TestPausedBehindBackIsResumed: a suspected loss whose check finds the
// sandbox paused by someone else (a provider's own timeout) is no loss: the
// call's error stands, nothing is replaced, and the next call resumes it.
func TestPausedBehindBackIsResumed(t *testing.T) {
	p := managetest.New(t)
	m := newManager(t, p, nil)
	l := acquire(t, m, "k")
	id := l.Sandbox.ID
	if err := p.Pause(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	cause := &envdclient.HTTPStatusError{Status: 502}
	if err := l.Check(context.Background(), cause); !errors.Is(err, cause) {
		t.Fatalf("Check of a paused sandbox = %v; want the original error", err)
	}
	l.Release()
	l = acquire(t, m, "k")
	defer l.Release()
	resumed := false
	for _, e := range l.Events {
		resumed = resumed || e.Kind == manage.EventResumed
	}
	if l.Sandbox.ID != id || l.Generation != 1 || !resumed {
		t.Fatalf("next call on %s generation %d, events %v; want %s resumed, generation 1", l.Sandbox.ID, l.Generation, l.Events, id)
	}
	if info, _ := p.Info(t.Context(), id); info.State != manage.StateRunning {
		t.Fatalf("sandbox state %s after the next call, want running", info.State)
	}
}
