//go:build linux

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore/redistest"
)

// replicas returns n Managers, each with its own store (its own Redis
// client) on srv, sharing one provider: n server replicas.
func replicas(t *testing.T, srv *redistest.Server, p manage.Provider, n int, opts redisstore.Options) []*manage.Manager {
	t.Helper()
	ms := make([]*manage.Manager, n)
	for i := range ms {
		m, err := manage.New(manage.Options{Provider: p, Store: open(t, srv.URL(), opts), AutoRecreate: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
		ms[i] = m
	}
	return ms
}

// acquireAll makes calls first calls for key spread over ms at once and
// returns the sandbox ids they got.
func acquireAll(t *testing.T, ms []*manage.Manager, key string, calls int) map[string]int {
	t.Helper()
	var mu sync.Mutex
	ids := map[string]int{}
	var wg sync.WaitGroup
	for i := range calls {
		m := ms[i%len(ms)]
		wg.Go(func() {
			l, err := m.Acquire(context.Background(), key, true)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids[l.Sandbox.ID]++
			mu.Unlock()
			l.Release()
		})
	}
	wg.Wait()
	return ids
}

// 20 concurrent first calls spread over two replicas create one sandbox.
func TestTwoReplicasOneSandbox(t *testing.T) {
	srv := redistest.Start(t)
	p := managetest.New(t)
	ms := replicas(t, srv, p, 2, redisstore.Options{})
	for round := range 3 {
		key := fmt.Sprintf("http:alice:ws%d", round)
		before := p.Creates.Load()
		ids := acquireAll(t, ms, key, 20)
		if len(ids) != 1 || p.Creates.Load()-before != 1 {
			t.Fatalf("round %d: 20 first calls over two replicas made %d sandboxes (%v)", round, p.Creates.Load()-before, ids)
		}
	}
}

// A replica that died holding the creation lock (its key left, never
// renewed, never released) holds the others up until the lock expires;
// then one sandbox is made.
func TestDeadLockHolderThenOneSandbox(t *testing.T) {
	srv := redistest.Start(t)
	c := raw(t, srv)
	p := managetest.New(t)
	ms := replicas(t, srv, p, 2, redisstore.Options{})
	key := "http:alice:proj"
	if err := c.Set(t.Context(), redisstore.DefaultKeyPrefix+"lock:"+key, "replica-killed-by-SIGKILL", 500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	ids := acquireAll(t, ms, key, 10)
	if len(ids) != 1 || p.Creates.Load() != 1 {
		t.Fatalf("after a dead holder's lock expired, %d sandboxes were made (%v)", p.Creates.Load(), ids)
	}
}

// A lock taken over while the provider creates (the holder was cut off from
// Redis for longer than the expiry, another replica took it) cancels the
// creation; nothing is recorded, and the next call makes one sandbox.
func TestLockTakenOverMidCreation(t *testing.T) {
	srv := redistest.Start(t)
	c := raw(t, srv)
	p := managetest.New(t)
	ms := replicas(t, srv, p, 1, redisstore.Options{LockExpiry: 300 * time.Millisecond})
	key := "http:alice:proj"
	waiting, release := p.BlockCreate()
	errc := make(chan error, 1)
	go func() {
		_, err := ms[0].Acquire(context.Background(), key, true)
		errc <- err
	}()
	<-waiting
	if err := c.Set(t.Context(), redisstore.DefaultKeyPrefix+"lock:"+key, "another-replica", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if !errors.Is(err, manage.ErrLockLost) {
		t.Fatalf("Acquire = %v; want the creation to fail with ErrLockLost", err)
	}
	release()
	if live := p.Live(); len(live) != 0 {
		t.Fatalf("sandboxes %v live after a creation under a lost lock", live)
	}
	if n, _ := c.Exists(t.Context(), redisstore.DefaultKeyPrefix+"ws:"+key).Result(); n != 0 {
		t.Fatal("a creation under a lost lock was recorded")
	}
	// The other replica finishes and releases its lock.
	c.Del(t.Context(), redisstore.DefaultKeyPrefix+"lock:"+key)
	l, err := ms[0].Acquire(t.Context(), key, true)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if len(p.Live()) != 1 {
		t.Fatalf("live sandboxes %v after the retry; want 1", p.Live())
	}
}

// Redis down: a replica's first call fails with the clear error (bounded,
// no hang) and creates nothing; once Redis is back it adopts the sandbox
// the other replica recorded.
func TestRedisDownNoDuplicate(t *testing.T) {
	srv := redistest.Start(t)
	p := managetest.New(t)
	ms := replicas(t, srv, p, 2, redisstore.Options{CommandTimeout: 200 * time.Millisecond})
	store := open(t, srv.URL(), redisstore.Options{})
	key := "http:alice:proj"
	l, err := ms[0].Acquire(t.Context(), key, true)
	if err != nil {
		t.Fatal(err)
	}
	id := l.Sandbox.ID
	l.Release()
	rec, ok, err := store.Get(t.Context(), key)
	if err != nil || !ok || rec.SandboxID != id {
		t.Fatalf("record %+v, %v, %v; want the first replica's sandbox %s", rec, ok, err, id)
	}
	for _, down := range []string{"frozen", "stopped"} {
		if down == "frozen" {
			srv.Freeze()
		} else {
			srv.Stop()
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		_, err := ms[1].Acquire(ctx, key, true)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "redis store at unix:"+srv.Socket()+" unreachable") {
			t.Fatalf("Acquire with redis %s = %v; want the clear unreachable error", down, err)
		}
		if down == "frozen" {
			srv.Thaw()
		} else {
			srv.Start()
			// A killed test Redis lost its data (no persistence); a
			// persistent one keeps the record, so put it back.
			if err := store.Put(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err = ms[1].Acquire(t.Context(), key, true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if l.Sandbox.ID != id || p.Creates.Load() != 1 {
		t.Fatalf("after redis returned the second replica got %s (%d creations); want the first replica's %s", l.Sandbox.ID, p.Creates.Load(), id)
	}
}

// The limit of sandboxes per principal holds over two replicas, each with
// its own client of one Redis.
func TestSandboxesPerPrincipalAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	managetest.SandboxLimitAcrossServers(t, func(t *testing.T, p manage.Provider, mod func(*manage.Options)) (a, b *manage.Manager) {
		prefix := strings.ReplaceAll(t.Name(), "/", ":") + ":"
		ms := make([]*manage.Manager, 2)
		for i := range ms {
			opts := manage.Options{Provider: p, Store: open(t, srv.URL(), redisstore.Options{KeyPrefix: prefix}), AutoRecreate: true, Logger: quiet}
			mod(&opts)
			m, err := manage.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
			ms[i] = m
		}
		return ms[0], ms[1]
	})
}

// A replica that dies while creating (its reservation made, never released:
// its connection to Redis gone) holds the slot only until the reservation
// lapses; then another replica creates in it.
func TestSlotOfDeadReplicaLapses(t *testing.T) {
	srv := redistest.Start(t)
	p := managetest.New(t)
	dying := open(t, srv.URL(), redisstore.Options{})
	if _, err := dying.ReserveSlot(t.Context(), manage.SlotRequest{Key: "alice/dying", Owner: "alice", Max: 1, OwnerOf: managetest.OwnerBeforeSlash, Expiry: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := dying.Close(); err != nil {
		t.Fatal(err)
	}
	// The reservation is in Redis, with no one left to release it.
	if score, err := raw(t, srv).ZScore(t.Context(), redisstore.DefaultKeyPrefix+"slots:alice", "alice/dying").Result(); err != nil || score <= 0 {
		t.Fatalf("the dead replica's reservation: score %v, %v", score, err)
	}
	m, err := manage.New(manage.Options{Provider: p, Store: open(t, srv.URL(), redisstore.Options{}), AutoRecreate: true, Logger: quiet, MaxSandboxesPerOwner: 1, OwnerOf: managetest.OwnerBeforeSlash})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if _, err := m.Acquire(t.Context(), "bob/x", false); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	// The lapse is a matter of time passing: retry until admitted, failing
	// only when the test's deadline is near.
	for {
		l, err := m.Acquire(t.Context(), "alice/live", false)
		if err == nil {
			l.Release()
			break
		}
		if !manage.IsLimit(err) {
			t.Fatal(err)
		}
		if d, ok := t.Deadline(); ok && time.Until(d) < 5*time.Second {
			t.Fatal("the dead replica's reservation still counts")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.Creates.Load(); n != 2 {
		t.Fatalf("%d sandboxes made, want 2", n)
	}
}

// A replica's creation that fails (here: its CreateTimeout ends a Create
// that hangs) gives its slot back at once, to every replica: the
// reservation, which would last an hour, is released.
func TestSlotOfFailedCreationReleased(t *testing.T) {
	srv := redistest.Start(t)
	p := managetest.New(t)
	ms := make([]*manage.Manager, 2)
	for i := range ms {
		m, err := manage.New(manage.Options{Provider: p, Store: open(t, srv.URL(), redisstore.Options{}), AutoRecreate: true, Logger: quiet,
			MaxSandboxesPerOwner: 1, OwnerOf: managetest.OwnerBeforeSlash, CreateTimeout: 100 * time.Millisecond, CallTimeout: 30 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
		ms[i] = m
	}
	waiting, release := p.BlockCreate()
	errc := make(chan error, 1)
	go func() {
		_, err := ms[0].Acquire(t.Context(), "alice/hangs", false)
		errc <- err
	}()
	<-waiting
	if err := <-errc; err == nil || manage.IsLimit(err) {
		t.Fatalf("a creation that hangs past CreateTimeout: %v; want its failure", err)
	}
	release()
	if _, err := ms[1].Acquire(t.Context(), "alice/next", false); err != nil {
		t.Fatalf("the other replica, after the failed creation: %v", err)
	}
}
