//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStat is what /proc/PID/stat says of a process.
type procStat struct {
	state byte   // 'R', 'S', 'T', 'Z', …
	ppid  int    // its parent
	start string // its start time in clock ticks since boot
}

// readStat reads /proc/PID/stat; false when pid is gone (or unreadable).
func readStat(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(string(data))
}

// parseStat parses the content of a /proc/PID/stat file.
func parseStat(s string) (procStat, bool) {
	// "pid (comm) state ppid ... starttime ...": comm may hold spaces and
	// parentheses, so the fields are counted after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], ppid: ppid, start: f[19]}, true
}

// procParents maps every visible pid to its parent.
func procParents() map[int]int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parents := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			parents[pid] = st.ppid
		}
	}
	return parents
}

// procState returns the state letter of pid ('R', 'S', 'T', …), or 0 when
// it cannot be read.
func procState(pid int) byte {
	st, _ := readStat(pid)
	return st.state
}

// procStart returns the start time of pid in clock ticks since boot, or ""
// when it is gone.
func procStart(pid int) string {
	st, _ := readStat(pid)
	return st.start
}

// descendants returns root and all its descendants, from one walk of /proc.
func descendants(root int) []int {
	children := map[int][]int{}
	for pid, ppid := range procParents() {
		children[ppid] = append(children[ppid], pid)
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// continueTree sends SIGCONT to root and all its descendants.
func continueTree(root int) {
	for _, pid := range descendants(root) {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// stopTree stops root and all its descendants with SIGSTOP and waits until
// each one is stopped (state T in /proc) or gone. A stopped process cannot
// fork, so the tree is walked again after every round until a walk finds no
// process it did not stop yet; that catches children forked meanwhile.
func stopTree(ctx context.Context, root int) error {
	stopped := map[int]bool{}
	for {
		var fresh []int
		for _, pid := range descendants(root) {
			if !stopped[pid] {
				fresh = append(fresh, pid)
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		// SIGSTOP takes effect when the target next returns to user space:
		// wait for it to show. A process in uninterruptible sleep (D: disk
		// I/O, or a vfork parent whose child is now stopped) stops as soon
		// as it leaves the kernel, so it runs no more code either.
		for _, pid := range fresh {
			var st byte
			err := poll(ctx, 20*time.Microsecond, 2*time.Millisecond, func() (bool, error) {
				st = procState(pid)
				return st == 'T' || st == 't' || st == 'D' || st == 0 || st == 'Z' || st == 'X', nil
			})
			if err != nil {
				return fmt.Errorf("process %d (state %c) did not stop: %w", pid, st, err)
			}
			stopped[pid] = true
		}
	}
}

// killTree kills root and all its descendants, for processes no cgroup
// holds. The tree is stopped first so that nothing forks between the walk
// and the kill; processes that put themselves in new process groups or
// sessions are found all the same, as long as root still runs.
func killTree(root int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = stopTree(ctx, root)
	for _, pid := range descendants(root) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
