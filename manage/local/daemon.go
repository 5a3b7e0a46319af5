//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
)

// daemon is one running (or exited) envd of a sandbox, with the bwrap around
// it when isolated, started by this Provider.
type daemon struct {
	isolation string
	cmd       *exec.Cmd
	pid       int           // the process started: bwrap, or envd itself (none)
	cg        *cgroup       // nil without cgroups
	egress    *egressServer // the sandbox's egress proxy; nil: none
	dir       string        // the sandbox directory
	record    daemonRecord
	stderr    *tailBuffer
	// lock is the sandbox's owner lock, held while the daemon runs and
	// released by the waiter once it ended and was cleaned up.
	lock     *os.File
	done     chan struct{} // closed once the daemon exited and was cleaned up
	released chan struct{} // closed after done, once the owner lock is released
	exitErr  error         // why it exited; set before done is closed
	endedAt  time.Time     // when the waiter saw it exit; set before done
	// detached is set for a daemon that outlives this process (see
	// detach): pid is then its keeper's.
	detached bool
	// hostID is the sandbox's own host uid, which only its processes run
	// as (hostids.go); 0: it shares the provider's.
	hostID int
	// stopReason, when set before the daemon is killed, replaces the exit
	// status in its detail ("daemon stopped: …").
	stopReason atomic.Pointer[string]
}

// alive reports whether the daemon has not exited yet.
func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// exitDetail says in a few words why the daemon ended.
func (d *daemon) exitDetail() string {
	if r := d.stopReason.Load(); r != nil {
		return "daemon stopped: " + *r
	}
	return "daemon exited: " + describeExit(d.exitErr, d.isolation, d.detached)
}

// output is the end of what the daemon wrote (bwrap's messages, envd's logs).
func (d *daemon) output() string {
	if d.detached {
		return logTail(d.dir)
	}
	return strings.TrimSpace(d.stderr.String())
}

// describeExit renders a daemon's end. bwrap's pid 1 exits with 128+n when the
// sandboxed command died of signal n, and so does a detached daemon's keeper
// when its child did; that is reported as the signal.
func describeExit(err error, isolation string, detached bool) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return "signal: " + ws.Signal().String()
			}
			if sig, ok := signalledExit(ws); ok && (isolation == IsolationBwrap || detached) {
				return "signal: " + sig.String()
			}
		}
		return ee.Error()
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// wait reaps the daemon, records why it ended, kills whatever is left of the
// sandbox (an unisolated envd's children outlive it), removes its cgroup and
// unmounts its disk image, then closes done and releases the owner lock: the cgroup is named after
// the sandbox, so it must be gone before another Provider may start the
// sandbox again and make a new one.
func (d *daemon) wait() {
	err := d.cmd.Wait()
	d.egress.close()
	if d.isolation != IsolationBwrap {
		_ = syscall.Kill(-d.pid, syscall.SIGKILL)
	}
	if d.cg != nil {
		_ = d.cg.remove(context.Background())
	}
	// A stopped sandbox holds no mount: its disk image is mounted again
	// when it is resumed (disk.go).
	unmountVolume(d.dir)
	d.exitErr, d.endedAt = err, time.Now()
	rec := d.record
	rec.EndedAt, rec.Exit = d.endedAt.UTC(), d.exitDetail()
	// Fails harmlessly when the directory was killed.
	_ = writeRecord(d.dir, rec)
	close(d.done)
	_ = d.lock.Close()
	close(d.released)
}

// stopDaemon kills the sandbox's processes and waits for the daemon to be
// reaped, until ctx ends. reason, when not empty, is what the sandbox's
// detail says afterwards ("daemon stopped: reason").
func (p *Provider) stopDaemon(ctx context.Context, d *daemon, reason ...string) error {
	if !d.alive() {
		return nil
	}
	if len(reason) > 0 {
		d.stopReason.CompareAndSwap(nil, &reason[0])
	}
	killProcs(d.cg, d.pid, d.isolation)
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctxError("stop sandbox daemon", ctx.Err())
	}
}

// killProcs kills the processes of a sandbox daemon: everything in its
// cgroup cg, or without one the process tree at pid (unless under bwrap, see
// below); then pid itself, the outermost process, and without bwrap its
// process group. pid 0 means unknown.
func killProcs(cg *cgroup, pid int, isolation string) {
	if cg != nil {
		cg.kill()
	} else if isolation != IsolationBwrap && pid > 0 {
		// envd starts commands in process groups of their own.
		killTree(pid)
	}
	if pid <= 0 {
		return
	}
	// bwrap's sandbox dies with it: its pid 1 has bwrap as parent-death
	// signal source, and the pid namespace ends with its pid 1.
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if isolation != IsolationBwrap {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// tailBuffer keeps the last bytes written to it. It is safe for concurrent
// use.
type tailBuffer struct {
	mu    sync.Mutex
	buf   []byte
	limit int
}

func newTailBuffer(limit int) *tailBuffer { return &tailBuffer{limit: limit} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// ctxError turns a context error into a connect error.
func ctxError(what string, err error) error {
	code := connect.CodeCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, fmt.Errorf("%s: %w", what, err))
}
