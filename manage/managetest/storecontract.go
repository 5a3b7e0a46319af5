package managetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	t.Run("Slots", func(t *testing.T) {
		s := newStore(t)
		other := s
		if shared {
			other = newStore(t)
		}
		slotContract(t, s, other)
	})
	t.Run("SlotLapses", func(t *testing.T) {
		slotLapseContract(t, newStore(t))
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

// OwnerBeforeSlash takes a key's owner from "OWNER/NAME" ("" without a
// slash), as Options.OwnerOf for tests of the limit of sandboxes.
func OwnerBeforeSlash(key string) string {
	owner, _, ok := strings.Cut(key, "/")
	if !ok {
		return ""
	}
	return owner
}

// slotRequest asks for a slot of key under a limit of max, its owner taken
// by OwnerBeforeSlash.
func slotRequest(key string, max int) manage.SlotRequest {
	return manage.SlotRequest{Key: key, Owner: OwnerBeforeSlash(key), Max: max, OwnerOf: OwnerBeforeSlash, Expiry: time.Minute}
}

// reserveWant reserves key's slot in st and fails t unless the outcome is
// want (admitted, or a *LimitError with held counted); release is nil when
// refused.
func reserveWant(t *testing.T, st manage.Store, key string, max int, admitted bool, held int) (release func()) {
	t.Helper()
	release, err := st.ReserveSlot(t.Context(), slotRequest(key, max))
	var le *manage.LimitError
	switch {
	case admitted && err != nil:
		t.Fatalf("ReserveSlot(%s) = %v; want admitted", key, err)
	case admitted:
		return release
	case err == nil:
		release()
		t.Fatalf("ReserveSlot(%s) admitted; want a LimitError", key)
	case !errors.As(err, &le):
		t.Fatalf("ReserveSlot(%s) = %v; want a LimitError", key, err)
	case le.Owner != OwnerBeforeSlash(key) || le.Max != max || le.Held != held:
		t.Fatalf("ReserveSlot(%s) = %+v; want owner %s, max %d, held %d", key, le, OwnerBeforeSlash(key), max, held)
	}
	return nil
}

// slotContract checks ReserveSlot between s and other (the same store, or
// another sharing its records): reservations and records of sandboxes
// count, released reservations without a record and records of gone
// sandboxes do not, owners are counted apart, and concurrent reservations
// over both stores never let an owner past its limit.
func slotContract(t *testing.T, s, other manage.Store) {
	ctx := t.Context()
	relA := reserveWant(t, s, "alice/a", 2, true, 0)
	relB := reserveWant(t, other, "alice/b", 2, true, 0)
	reserveWant(t, other, "alice/c", 2, false, 2)
	reserveWant(t, s, "alice/c", 2, false, 2)
	reserveWant(t, s, "bob/a", 2, true, 0)()
	reserveWant(t, s, "nobody", 2, true, 0)()
	// A key that holds a slot is admitted again (a reset).
	reserveWant(t, other, "alice/a", 2, true, 0)()
	// alice/a's creation failed: released with no record, its slot is free.
	relA()
	relA()
	// alice/b's creation succeeded: its record holds the slot after release.
	if err := other.Put(ctx, manage.Record{Key: "alice/b", SandboxID: "sb", State: manage.StateRunning}); err != nil {
		t.Fatal(err)
	}
	relB()
	relC := reserveWant(t, s, "alice/c", 2, true, 0)
	if err := s.Put(ctx, manage.Record{Key: "alice/c", SandboxID: "sc", State: manage.StatePaused}); err != nil {
		t.Fatal(err)
	}
	relC()
	reserveWant(t, other, "alice/d", 2, false, 2)
	// A record written without a reservation (rebuilt) counts too.
	if err := s.Put(ctx, manage.Record{Key: "carol/x", SandboxID: "sx", State: manage.StateStopped}); err != nil {
		t.Fatal(err)
	}
	reserveWant(t, other, "carol/y", 1, false, 1)
	// A sandbox gone (record marked gone, or deleted) frees its slot.
	if err := s.Put(ctx, manage.Record{Key: "alice/b", SandboxID: "sb", State: manage.StateGone}); err != nil {
		t.Fatal(err)
	}
	relD := reserveWant(t, other, "alice/d", 2, true, 0)
	reserveWant(t, s, "alice/e", 2, false, 2)
	if err := other.Delete(ctx, "alice/c"); err != nil {
		t.Fatal(err)
	}
	reserveWant(t, s, "alice/e", 2, true, 0)()
	relD()

	// Twenty reservations at once, half on each store, each kept: exactly
	// max are admitted; another owner reserving meanwhile is unaffected.
	const max, calls = 4, 20
	var mu sync.Mutex
	var admitted []func()
	limited := 0
	var wg sync.WaitGroup
	for i := range calls {
		st := []manage.Store{s, other}[i%2]
		wg.Go(func() {
			release, err := st.ReserveSlot(ctx, slotRequest(fmt.Sprintf("dave/%d", i), max))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted = append(admitted, release)
			case manage.IsLimit(err):
				limited++
			default:
				t.Error(err)
			}
		})
		wg.Go(func() {
			release, err := st.ReserveSlot(ctx, slotRequest(fmt.Sprintf("erin/%d", i%max), max))
			if err != nil {
				t.Errorf("erin, under her limit while dave is at his: %v", err)
				return
			}
			release()
		})
	}
	wg.Wait()
	if len(admitted) != max || limited != calls-max {
		t.Fatalf("concurrent reservations: %d admitted, %d refused; want %d and %d", len(admitted), limited, max, calls-max)
	}
	for _, release := range admitted {
		release()
	}
	reserveWant(t, other, "dave/again", max, true, 0)()
}

// slotLapseContract checks that a reservation never released (its server
// died holding it) stops counting once its expiry passed.
func slotLapseContract(t *testing.T, s manage.Store) {
	// Unlapsed, a reservation no record stands behind holds its slot: the
	// lapse below is what frees it, not a reservation that never counted.
	release := reserveWant(t, s, "gina/dead", 1, true, 0)
	reserveWant(t, s, "gina/alive", 1, false, 1)
	release()
	req := slotRequest("frank/dead", 1)
	req.Expiry = time.Millisecond
	if _, err := s.ReserveSlot(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	// Wait for the lapse, which is a matter of time passing: retry until
	// admitted, failing only when the test's deadline is near.
	for {
		release, err := s.ReserveSlot(t.Context(), slotRequest("frank/alive", 1))
		if err == nil {
			release()
			return
		}
		if !manage.IsLimit(err) {
			t.Fatal(err)
		}
		if d, ok := t.Deadline(); ok && time.Until(d) < 5*time.Second {
			t.Fatal("a reservation of 1ms still counts")
		}
		time.Sleep(time.Millisecond)
	}
}
