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

// procParents maps every visible pid to its parent, from /proc/<pid>/stat.
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
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses,
		// so parse after the last ')'.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			parents[pid] = ppid
		}
	}
	return parents
}

// procState returns the state letter of pid from /proc ('R', 'S', 'T', …), or
// 0 when it cannot be read.
func procState(pid int) byte {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
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
		wait := 20 * time.Microsecond
		for _, pid := range fresh {
			for {
				st := procState(pid)
				if st == 'T' || st == 't' || st == 'D' || st == 0 || st == 'Z' || st == 'X' {
					break
				}
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return fmt.Errorf("process %d (state %c) did not stop: %w", pid, st, ctx.Err())
				case <-t.C:
				}
				wait = min(wait*2, 2*time.Millisecond)
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
