//go:build linux

package daemon

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func threadCount(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// The reserve leaves at least n OS threads behind, idle.
func TestReserveThreads(t *testing.T) {
	// More than the process has: the reserve must add threads (others'
	// tests may have made some already).
	before := threadCount(t)
	n := before + 24
	reserveThreads(n)
	if got := threadCount(t); got < n {
		t.Fatalf("%d threads after reserving %d (%d before)", got, n, before)
	}
	reserveThreads(0) // no-op
}

func TestReservedThreads(t *testing.T) {
	for _, tc := range []struct {
		nproc uint64
		want  int
	}{
		{0, maxReservedThreads},
		{unix.RLIM_INFINITY, maxReservedThreads},
		{16, minReservedThreads},
		{48, 6},
		{4096, maxReservedThreads},
	} {
		if got := reservedThreads(tc.nproc); got != tc.want {
			t.Errorf("reservedThreads(%d) = %d; want %d", tc.nproc, got, tc.want)
		}
	}
}
