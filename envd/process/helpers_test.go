//go:build linux

package process

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// waitLimit bounds every wait in these tests; it only fires on failure.
const waitLimit = 20 * time.Second

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "LANG=C"}

type output struct {
	stdout, stderr, pty bytes.Buffer
	sizes               []int
	end                 End
}

// collect reads sub until the End and returns everything.
func collect(t *testing.T, sub *Subscription) *output {
	t.Helper()
	defer sub.Close()
	out := &output{}
	timeout := time.After(waitLimit)
	for {
		select {
		case c, ok := <-sub.Chunks():
			if !ok {
				out.end = sub.End()
				return out
			}
			out.sizes = append(out.sizes, len(c.Bytes()))
			switch c.Stream {
			case Stdout:
				out.stdout.Write(c.Bytes())
			case Stderr:
				out.stderr.Write(c.Bytes())
			case PTY:
				out.pty.Write(c.Bytes())
			}
			c.Release()
		case <-timeout:
			t.Fatalf("no end event within %v", waitLimit)
		}
	}
}

func start(t *testing.T, tab *Table, spec Spec) (*Process, *Subscription) {
	t.Helper()
	if spec.Env == nil {
		spec.Env = testEnv
	}
	p, sub, err := tab.Start(spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Cmd, err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	return p, sub
}

func newTable(t *testing.T, opts TableOptions) *Table {
	tab := NewTable(opts)
	t.Cleanup(tab.Close)
	return tab
}

// waitGone blocks until the process pid has exited (a zombie counts as gone).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		testenv.Missing(t, "pidfd_open (%v): run the tests on Linux 5.3 or later", err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(waitLimit/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			t.Fatalf("process %d still running after %v", pid, waitLimit)
		}
		return
	}
}
