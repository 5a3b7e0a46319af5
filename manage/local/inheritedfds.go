//go:build linux

package local

import (
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// closeInheritedOnce guards closeInheritedFDsOnExec.
var closeInheritedOnce sync.Once

// closeInheritedFDsOnExec marks every file descriptor above 2 that the
// server inherited from its parent close-on-exec. Go opens its own with
// O_CLOEXEC, but inherited ones would otherwise pass through bwrap and envd
// into every sandbox process, and an inherited directory descriptor is a way
// out of a mount namespace. The server itself keeps using them; only its
// children (all of them) stop inheriting them. Done once per process.
func closeInheritedFDsOnExec() {
	closeInheritedOnce.Do(func() {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return
		}
		for _, e := range entries {
			fd, err := strconv.Atoi(e.Name())
			if err != nil || fd <= 2 {
				continue
			}
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			if err == nil && flags&unix.FD_CLOEXEC == 0 {
				_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
			}
		}
	})
}
