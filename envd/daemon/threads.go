//go:build linux

package daemon

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Thread reserve bounds: reserveThreads keeps one idle OS thread per eight
// tasks the sandbox may have, within these bounds.
const (
	minReservedThreads = 4
	maxReservedThreads = 16
)

// reservedThreads is how many idle OS threads the daemon makes at start for
// a task limit of nproc (RLIMIT_NPROC; 0 or RLIM_INFINITY means none).
func reservedThreads(nproc uint64) int {
	if nproc == 0 || nproc == unix.RLIM_INFINITY {
		return maxReservedThreads
	}
	return int(min(max(nproc/8, minReservedThreads), maxReservedThreads))
}

// reserveThreads makes the Go runtime start n OS threads now and keep them
// idle. The sandbox's workload shares the daemon's task limit (cgroup
// pids.max and RLIMIT_NPROC count threads), and the runtime cannot survive
// failing to create a thread: it aborts the whole daemon. A workload that
// fills the limit (a fork bomb, make -j) would then take envd down with it
// the next time a request blocks in a file syscall. The runtime never ends
// idle threads, so the ones made here serve such requests later.
//
// Each goroutine locks itself to a thread and waits, so the scheduler must
// start another thread for the next one; once all n hold their own thread,
// they unlock and return, leaving the threads idle. No-op for n <= 0.
func reserveThreads(n int) {
	if n <= 0 {
		return
	}
	held := make(chan struct{})
	release := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			held <- struct{}{}
			<-release
			runtime.UnlockOSThread()
		}()
	}
	for range n {
		<-held
	}
	close(release)
}

// ownTaskLimit is the daemon's RLIMIT_NPROC soft limit (0 if unknown).
func ownTaskLimit() uint64 {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &lim) != nil {
		return 0
	}
	return lim.Cur
}
