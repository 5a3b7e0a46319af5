// Package filelock takes advisory flock(2) locks (LockFileEx on Windows) on
// files that callers can stop waiting for.
//
// A blocking flock cannot be abandoned: a thread parked in it stays parked,
// with the descriptor open, until the lock comes, and a later grant would be
// held by nobody. So Lock never blocks in the kernel: it tries without
// blocking and, while the lock is held elsewhere, tries again after a short,
// growing pause until the lock comes or its context ends.
//
// flock locks belong to an open file description: two descriptors opened
// separately exclude each other whether they are in one process or in two.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrLocked is TryLock's answer when the lock is held elsewhere.
var ErrLocked = errors.New("locked")

// Pauses between attempts of Lock: the first, doubled after each attempt up
// to the last.
const (
	firstPause = 50 * time.Microsecond
	maxPause   = 10 * time.Millisecond
)

// Lock opens path (creating it, mode 0600; a symlink is refused) and flocks
// it: how is Shared or Exclusive. While the lock is held elsewhere
// it waits until ctx ends, and then returns ctx.Err() having released
// everything. A free lock is taken even when ctx has ended. Closing the returned file (or Unlock) releases the lock.
func Lock(ctx context.Context, path string, how int) (*os.File, error) {
	return lock(ctx, path, how, true)
}

// TryLock is Lock without the wait: a lock held elsewhere is ErrLocked.
func TryLock(path string, how int) (*os.File, error) {
	return lock(context.Background(), path, how, false)
}

// Unlock releases the lock on f and closes it. The explicit unlock matters
// when a child forked meanwhile still shares f's open file description
// (until its exec closes it): closing f alone would leave the lock held by
// that child for a moment.
func Unlock(f *os.File) error {
	err := unlockFile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func lock(ctx context.Context, path string, how int, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|noFollow, 0o600)
	if err != nil {
		return nil, err
	}
	pause := firstPause
	for {
		err := tryLockFile(f, how)
		switch {
		case err == nil:
			return f, nil
		case !errors.Is(err, errWouldBlock):
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		case !wait:
			_ = f.Close()
			return nil, ErrLocked
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(pause*2, maxPause)
	}
}
