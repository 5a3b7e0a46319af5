package managetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// StoreContract runs the tests every manage.Store passes. newStore returns
// a fresh, empty store each time it is called; two stores it returns in one
// test must share their records and locks when shared is true (two
// processes on one state directory, two replicas on one Redis), and
// StoreContract then checks that too.
func StoreContract(t *testing.T, newStore func(t *testing.T) manage.Store, shared bool) {
	t.Run("CRUD", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t)
		if _, ok, err := s.Get(ctx, "k"); ok || err != nil {
			t.Fatalf("Get on an empty store = %v, %v", ok, err)
		}
		now := time.Now().UTC().Truncate(time.Second)
		rec := manage.Record{Key: "stdio:proj", Provider: "local", SandboxID: "labc", Generation: 3, State: manage.StatePaused, Named: true, CreatedAt: now, UpdatedAt: now, PausedAt: now}
		if err := s.Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.Get(ctx, rec.Key)
		if err != nil || !ok || got != rec {
			t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, rec)
		}
		rec.Generation, rec.State, rec.PausedAt = 4, manage.StateRunning, time.Time{}
		if err := s.Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := s.Get(ctx, rec.Key); got != rec {
			t.Fatalf("Get after a second Put = %+v; want %+v", got, rec)
		}
		if err := s.Put(ctx, manage.Record{Key: "other"}); err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 0, len(list))
		for _, r := range list {
			keys = append(keys, r.Key)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"other", "stdio:proj"}) {
			t.Fatalf("List keys = %v", keys)
		}
		if err := s.Delete(ctx, rec.Key); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "missing"); err != nil {
			t.Fatalf("Delete of a missing key: %v", err)
		}
		if _, ok, _ := s.Get(ctx, rec.Key); ok {
			t.Fatal("record still there after Delete")
		}
	})
	t.Run("Lock", func(t *testing.T) {
		s := newStore(t)
		other := s
		if shared {
			other = newStore(t)
		}
		lockContract(t, s, other)
	})
	if shared {
		t.Run("SharedRecords", func(t *testing.T) {
			ctx := t.Context()
			a, b := newStore(t), newStore(t)
			if err := a.Put(ctx, manage.Record{Key: "k", SandboxID: "s1", Generation: 2}); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := b.Get(ctx, "k"); err != nil || !ok || got.SandboxID != "s1" {
				t.Fatalf("the other store's Get = %+v, %v, %v", got, ok, err)
			}
		})
	}
}

// lockContract checks Lock's exclusion between s and other (the same store,
// or another sharing its locks).
func lockContract(t *testing.T, s, other manage.Store) {
	ctx := t.Context()
	held, unlock, err := s.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if held.Err() != nil {
		t.Fatalf("held context done while the lock is held: %v", context.Cause(held))
	}
	// While it is held, a second locker waits until its context ends.
	for name, st := range map[string]manage.Store{"same store": s, "other store": other} {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, u, err := st.Lock(cctx, "k"); !errors.Is(err, context.Canceled) {
			if u != nil {
				u()
			}
			t.Fatalf("%s: Lock with a cancelled context while held = %v; want context.Canceled", name, err)
		}
		tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, u, err := st.Lock(tctx, "k")
		tcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			if u != nil {
				u()
			}
			t.Fatalf("%s: Lock with a short deadline while held = %v; want context.DeadlineExceeded", name, err)
		}
	}
	// Another key is independent.
	_, u3, err := other.Lock(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	u3()

	// A waiting locker acquires once the holder unlocks, and not before:
	// it has not returned while the lock was held (checked above), and
	// returns after unlock.
	acquired := make(chan func(), 1)
	errc := make(chan error, 1)
	go func() {
		_, u, err := other.Lock(ctx, "k")
		if err != nil {
			errc <- err
			return
		}
		acquired <- u
	}()
	unlock()
	unlock() // twice is harmless
	if held.Err() == nil {
		t.Fatal("held context not done after unlock")
	}
	if errors.Is(context.Cause(held), manage.ErrLockLost) {
		t.Fatalf("held context's cause after unlock = %v; an unlock is no loss", context.Cause(held))
	}
	select {
	case u := <-acquired:
		tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if _, u2, err := s.Lock(tctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			if u2 != nil {
				u2()
			}
			t.Errorf("Lock while the other holds it = %v; want context.DeadlineExceeded", err)
		}
		tcancel()
		u()
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting locker did not acquire after unlock")
	}
	for _, st := range []manage.Store{s, other} {
		_, u, err := st.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		u()
	}
}
