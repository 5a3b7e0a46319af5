//go:build unix

package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// guard bounds a wait that only lasts that long on failure.
const guard = 30 * time.Second

func TestTryLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	held, err := TryLock(path, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	for _, how := range []int{Exclusive, Shared} {
		if f, err := TryLock(path, how); !errors.Is(err, ErrLocked) {
			t.Errorf("TryLock(%d) of a held lock = %v, %v; want ErrLocked", how, f, err)
		}
	}
	if err := Unlock(held); err != nil {
		t.Fatal(err)
	}
	f, err := TryLock(path, Exclusive)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	_ = f.Close()
}

func TestSharedLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	a, err := TryLock(path, Shared)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Lock(context.Background(), path, Shared)
	if err != nil {
		t.Fatalf("a second shared lock: %v", err)
	}
	defer b.Close()
	if f, err := TryLock(path, Exclusive); !errors.Is(err, ErrLocked) {
		t.Errorf("TryLock(LOCK_EX) under shared locks = %v, %v; want ErrLocked", f, err)
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	held, err := TryLock(path, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	type result struct {
		f   *os.File
		err error
	}
	got := make(chan result, 1)
	go func() {
		f, err := Lock(ctx, path, Exclusive)
		got <- result{f, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("Lock returned while the lock was held: %v, %v", r.f, r.err)
	default:
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Lock after the holder let go: %v", r.err)
	}
	_ = r.f.Close()
}

// A waiter whose context ends gives up at once and leaves nothing behind: no
// open descriptor, and no lock granted later to nobody.
func TestLockGivesUpWithItsContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	held, err := TryLock(path, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		f, err := Lock(ctx, path, Exclusive)
		if f != nil {
			_ = f.Close()
		}
		got <- err
	}()
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock with its context canceled = %v, want context.Canceled", err)
		}
	case <-time.After(guard):
		t.Fatal("Lock did not give up when its context ended")
	}
	if after := openFDs(t); after != before {
		t.Errorf("open descriptors: %d before the abandoned Lock, %d after", before, after)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := TryLock(path, Exclusive)
	if err != nil {
		t.Fatalf("TryLock after the abandoned waiter and the holder let go: %v", err)
	}
	_ = f.Close()
}

func TestLockRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if f, err := TryLock(link, Exclusive); !errors.Is(err, unix.ELOOP) {
		t.Errorf("TryLock of a symlink = %v, %v; want ELOOP", f, err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the symlink's target was created: %v", err)
	}
}

func TestLockMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone", "l")
	if f, err := Lock(context.Background(), path, Exclusive); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lock in a missing directory = %v, %v; want ErrNotExist", f, err)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		testenv.Missing(t, "/proc/self/fd (%v): mount procfs on /proc", err)
	}
	return len(entries)
}
