package boltstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

func TestCRUD(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get on empty store = %v, %v", ok, err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	rec := manage.Record{Key: "stdio:proj", Provider: "local", SandboxID: "labc", Generation: 3, State: manage.StateRunning, Named: true, CreatedAt: now, UpdatedAt: now}
	if err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get(ctx, rec.Key)
	if err != nil || !ok || got != rec {
		t.Fatalf("Get = %+v, %v, %v; want %+v", got, ok, err, rec)
	}
	if err := s.Put(ctx, manage.Record{Key: "other"}); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %v, %v", list, err)
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
}

func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Put(ctx, manage.Record{Key: "stdio:w", SandboxID: "l1", Generation: 2}); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := s2.Get(ctx, "stdio:w")
	if err != nil || !ok || got.Generation != 2 {
		t.Fatalf("after reopen Get = %+v, %v, %v", got, ok, err)
	}
}

func TestCorruptFileMovedAside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), bytes.Repeat([]byte("not a bolt file "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open of a corrupt file should recover: %v", err)
	}
	if err := s.Put(context.Background(), manage.Record{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, FileName+".corrupt-*"))
	if len(aside) != 1 {
		t.Fatalf("corrupt file not kept aside: %v", aside)
	}
	if !strings.Contains(logs.String(), "corrupt") {
		t.Fatalf("recovery not logged: %s", logs.String())
	}
}

func TestLockedFileIsAClearError(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Another "process" holds the file (bbolt's flock is per open file).
	holder, err := bolt.Open(s.Path(), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	err = s.Put(context.Background(), manage.Record{Key: "k"})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("Put on a locked file = %v; want a clear locked error naming the file", err)
	}
}

func TestStateDirNotWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(file, "state"), Options{})
	if err == nil || !strings.Contains(err.Error(), "state directory") {
		t.Fatalf("Open under a file = %v; want a state directory error", err)
	}
}

func TestLockExcludes(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Another Store on the same directory stands for another process.
	other, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	_, unlock, err := s.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// While it is held, a second locker waits until its context ends: in this
	// store and in the other one.
	for name, st := range map[string]*Store{"same store": s, "other store": other} {
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

	// A waiting locker (in the other store) acquires once the holder
	// unlocks, and not before.
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	acquired := make(chan func(), 1)
	errc := make(chan error, 1)
	go func() {
		_, u, err := other.Lock(ctx, "k")
		if err != nil {
			errc <- err
			return
		}
		note("acquired")
		acquired <- u
	}()
	note("unlocked")
	unlock()
	select {
	case u := <-acquired:
		// The first holder may not lock again until the waiter lets go.
		tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if _, u2, err := s.Lock(tctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			if u2 != nil {
				u2()
			}
			t.Errorf("Lock while the other store holds it = %v; want context.DeadlineExceeded", err)
		}
		tcancel()
		u()
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting locker did not acquire after unlock")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "unlocked,acquired" {
		t.Fatalf("order = %v; the waiter acquired while the lock was held", order)
	}
	// Unlocked everywhere: either store takes it at once.
	for _, st := range []*Store{s, other} {
		_, u, err := st.Lock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		u()
	}
}

// Stores opened in one test share a state directory, as two processes do.
func TestStoreContract(t *testing.T) {
	dirs := map[string]string{}
	managetest.StoreContract(t, func(t *testing.T) manage.Store {
		dir, ok := dirs[t.Name()]
		if !ok {
			dir = t.TempDir()
			dirs[t.Name()] = dir
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, true)
}
