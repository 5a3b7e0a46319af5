//go:build linux

package manage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// faultStore wraps a Store to fail the calls made while the creation lock
// is held, and to lose the lock on demand.
type faultStore struct {
	manage.Store
	mu     sync.Mutex
	locked bool
	getErr error       // Get fails with it while the lock is held
	putErr error       // Put fails with it while the lock is held
	lose   func(error) // cancels the current held context
}

func (s *faultStore) Lock(ctx context.Context, key string) (context.Context, func(), error) {
	_, unlock, err := s.Store.Lock(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	held, cancel := context.WithCancelCause(context.Background())
	s.mu.Lock()
	s.locked, s.lose = true, cancel
	s.mu.Unlock()
	return held, func() {
		s.mu.Lock()
		s.locked = false
		s.mu.Unlock()
		cancel(errors.New("unlocked"))
		unlock()
	}, nil
}

func (s *faultStore) fault(get func(*faultStore) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.locked {
		return nil
	}
	return get(s)
}

func (s *faultStore) Get(ctx context.Context, key string) (manage.Record, bool, error) {
	if err := s.fault(func(s *faultStore) error { return s.getErr }); err != nil {
		return manage.Record{}, false, err
	}
	return s.Store.Get(ctx, key)
}

func (s *faultStore) Put(ctx context.Context, rec manage.Record) error {
	if err := s.fault(func(s *faultStore) error { return s.putErr }); err != nil {
		return err
	}
	return s.Store.Put(ctx, rec)
}

// A store that cannot be read under the creation lock stops the creation:
// another replica's sandbox may exist.
func TestNoCreationWhenTheStoreCannotBeReadUnderTheLock(t *testing.T) {
	p := managetest.New(t)
	store := &faultStore{Store: manage.NewMemoryStore(), getErr: errors.New("redis store at x unreachable: boom")}
	m := newManager(t, p, func(o *manage.Options) { o.Store = store })
	_, err := m.Acquire(t.Context(), "k", false)
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Acquire = %v; want the store's error", err)
	}
	if n := p.Creates.Load(); n != 0 {
		t.Fatalf("%d creations although the store could not be read under the lock", n)
	}
}

// An Info that cannot tell whether another replica's recorded sandbox lives
// stops the creation too.
func TestNoCreationWhenARecordedSandboxCannotBeChecked(t *testing.T) {
	p := managetest.New(t)
	store := manage.NewMemoryStore()
	// Another replica recorded generation 1 after this one found no record.
	inner := &recordOnLock{Store: store, rec: manage.Record{Key: "k", Provider: p.Name(), SandboxID: "tother", Generation: 1, State: manage.StateRunning}}
	hp := &hookProvider{Provider: p, info: func(context.Context) error { return errors.New("provider API down") }}
	m := newManager(t, hp, func(o *manage.Options) { o.Store = inner })
	_, err := m.Acquire(t.Context(), "k", false)
	if err == nil || !strings.Contains(err.Error(), "provider API down") {
		t.Fatalf("Acquire = %v; want the Info error", err)
	}
	if n := p.Creates.Load(); n != 0 {
		t.Fatalf("%d creations although the recorded sandbox could not be checked", n)
	}
}

// recordOnLock writes rec into the store as the lock is taken: another
// replica's record appearing between this one's read and its lock.
type recordOnLock struct {
	manage.Store
	rec manage.Record
}

func (s *recordOnLock) Lock(ctx context.Context, key string) (context.Context, func(), error) {
	held, unlock, err := s.Store.Lock(ctx, key)
	if err == nil {
		err = s.Put(ctx, s.rec)
	}
	return held, unlock, err
}

// A sandbox whose record cannot be written under the lock is destroyed: no
// replica could find it.
func TestUnrecordableSandboxIsDestroyed(t *testing.T) {
	p := managetest.New(t)
	store := &faultStore{Store: manage.NewMemoryStore(), putErr: errors.New("redis store at x unreachable: boom")}
	m := newManager(t, p, func(o *manage.Options) { o.Store = store })
	_, err := m.Acquire(t.Context(), "k", false)
	if err == nil || !strings.Contains(err.Error(), "was destroyed") {
		t.Fatalf("Acquire = %v; want a creation error saying the sandbox was destroyed", err)
	}
	if live := p.Live(); len(live) != 0 || p.Creates.Load() != 1 {
		t.Fatalf("live sandboxes %v after %d creations; want the unrecorded one destroyed", live, p.Creates.Load())
	}
	store.mu.Lock()
	store.putErr = nil
	store.mu.Unlock()
	l := acquire(t, m, "k")
	defer l.Release()
	if rec, ok, _ := store.Get(t.Context(), "k"); !ok || rec.SandboxID != l.Sandbox.ID {
		t.Fatalf("record %+v (%v); want the sandbox of the retry", rec, ok)
	}
}

// A creation lock lost while the provider creates cancels the creation; a
// sandbox made under it is never recorded nor published, and the next call
// creates one.
func TestLockLostMidCreation(t *testing.T) {
	for _, during := range []string{"create", "after create"} {
		t.Run(during, func(t *testing.T) {
			p := managetest.New(t)
			store := &faultStore{Store: manage.NewMemoryStore()}
			hp := &hookProvider{Provider: p}
			m := newManager(t, hp, func(o *manage.Options) { o.Store = store })
			lose := func() {
				store.mu.Lock()
				store.lose(fmt.Errorf("%w: the lock key holds another token", manage.ErrLockLost))
				store.mu.Unlock()
			}
			var waiting <-chan struct{}
			var release func()
			if during == "create" {
				waiting, release = p.BlockCreate()
				defer release()
			} else {
				// Lost after the provider made it, before it is recorded.
				var once sync.Once
				hp.mu.Lock()
				hp.create = func() error { once.Do(lose); return nil }
				hp.mu.Unlock()
			}
			errc := make(chan error, 1)
			go func() {
				_, err := m.Acquire(context.Background(), "k", false)
				errc <- err
			}()
			if waiting != nil {
				<-waiting
				lose()
			}
			err := <-errc
			if !errors.Is(err, manage.ErrLockLost) {
				t.Fatalf("Acquire = %v; want the creation to fail with the lost lock", err)
			}
			if live := p.Live(); len(live) != 0 {
				t.Fatalf("sandboxes %v live after a creation under a lost lock", live)
			}
			if _, ok, _ := store.Get(t.Context(), "k"); ok {
				t.Fatal("a sandbox made under a lost lock was recorded")
			}
			if release != nil {
				release()
			}
			hp.mu.Lock()
			hp.create = nil
			hp.mu.Unlock()
			l := acquire(t, m, "k")
			l.Release()
			if live := p.Live(); len(live) != 1 {
				t.Fatalf("live sandboxes %v after the retry; want 1", live)
			}
		})
	}
}
