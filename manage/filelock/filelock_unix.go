//go:build unix

package filelock

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The ways to lock, for Lock and TryLock: flock(2)'s own.
const (
	Shared    = unix.LOCK_SH
	Exclusive = unix.LOCK_EX
)

// noFollow makes the open refuse a symlink.
const noFollow = syscall.O_NOFOLLOW

// errWouldBlock is tryLockFile's error while the lock is held elsewhere.
var errWouldBlock = unix.EWOULDBLOCK

// tryLockFile flocks f how (Shared or Exclusive) without blocking.
func tryLockFile(f *os.File, how int) error { return flock(f, how|unix.LOCK_NB) }

// unlockFile releases f's flock.
func unlockFile(f *os.File) error { return flock(f, unix.LOCK_UN) }

// flock calls flock(2) on f, retrying when a signal interrupts it.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
