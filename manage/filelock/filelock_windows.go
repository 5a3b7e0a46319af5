package filelock

import (
	"os"

	"golang.org/x/sys/windows"
)

// The ways to lock, for Lock and TryLock: LockFileEx's flags.
const (
	Shared    = 0
	Exclusive = windows.LOCKFILE_EXCLUSIVE_LOCK
)

// noFollow is 0: Windows has no open flag that refuses a symlink, so Lock
// follows one there.
const noFollow = 0

// errWouldBlock is tryLockFile's error while the lock is held elsewhere.
var errWouldBlock = windows.ERROR_LOCK_VIOLATION

// tryLockFile locks f's first byte how (Shared or Exclusive) without
// blocking.
func tryLockFile(f *os.File, how int) error {
	var ol windows.Overlapped
	return windows.LockFileEx(windows.Handle(f.Fd()), uint32(how)|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
}

// unlockFile releases f's lock.
func unlockFile(f *os.File) error {
	var ol windows.Overlapped
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}
